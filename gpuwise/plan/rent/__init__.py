"""Renting GPUs for a stream of jobs under a long-run budget (Li, Berg, Mukhopadhyay,
Harchol-Balter, "How to Rent GPUs on a Budget", arXiv:2406.15560).

Modules: `speedup` (speedup families), `jobtypes` (job types and size distributions), `spec`
(YAML input), `solver` (the optimal fixed-width policy pi*), `occupancy` (GPUs rented at any
moment), `sweep` (E[T] and widths against the budget), `baselines`, `window` (finite-window spend).
Time is in hours throughout (arrival rates per hour, sizes in single-GPU hours of work).
"""
