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
