"""Suite-wide settings.

One BLAS / OpenMP thread per test process: pytest-xdist already runs one worker per core, and the
small SciPy fits (L-BFGS-B), NumPy and PyTorch work of the tests gain nothing from more threads, while
OpenBLAS's spinning threads on a shared 2-core machine cost 2-4x the CPU (Scavenger's demo search:
5.1 s CPU with the default threads, 1.4 s with one). Set here, before NumPy, SciPy or torch is
imported in the session: xdist's workers and the tests' subprocesses inherit it. An explicit
setting in the environment wins.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


# Longest first: pytest-xdist's --dist loadgroup hands out work in collection order, so the Ray cluster's
# group (tests/test_runtime_ray.py: a cluster started once, then runs of minutes, the longest unit of the
# suite), collected late by file name, used to start last and finish alone on one worker. Collected first,
# it runs on one worker while the short tests fill the other. Everything else keeps the collection order
# (the server group's timing-sensitive tests too: they start no earlier than before).


def _group(item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: _group(item) != "ray")


# Property tests draw the same examples on every run (a derandomised Hypothesis profile), so CI's verdict
# depends on the code, not on the draw. HYPOTHESIS_PROFILE=explore draws new random examples each run, to
# look for counterexamples locally.
from hypothesis import settings as _hyp  # noqa: E402

_hyp.register_profile("ci", derandomize=True, print_blob=True)
_hyp.register_profile("explore", print_blob=True)
_hyp.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
