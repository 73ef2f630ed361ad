"""Which samples a step trains: a pure function of where the step starts in the sample stream.

The stream is the dataset in a fresh seeded permutation per epoch, laid end to end; a step at global
batch B starting at sample offset o trains positions [o, o + B) of it, and rank r of W takes its
contiguous share (`gpuwise.runtime.training.share`: the first B % W ranks one more). At a fixed batch
the offset is step x B, so the batch is a function of the global step; when a rescale changes the batch
the offset (kept in the checkpoint) carries on, so after any change of width or batch the job trains
exactly the samples it would have trained next -- nothing skipped, nothing repeated.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from gpuwise.runtime.training import share


@lru_cache(maxsize=4)
def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng((seed, epoch)).permutation(n)


def global_indices(n: int, seed: int, offset: int, batch: int) -> np.ndarray:
    """Dataset indices of positions [offset, offset + batch) of the stream (may span epochs)."""
    if n < 1:
        raise ValueError("the dataset is empty")
    pos = np.arange(offset, offset + batch)
    out = np.empty(batch, dtype=np.int64)
    for epoch in np.unique(pos // n):
        sel = pos // n == epoch
        out[sel] = epoch_order(n, seed, int(epoch))[pos[sel] % n]
    return out


def local_indices(n: int, seed: int, offset: int, batch: int, rank: int, world: int) -> np.ndarray:
    lo, hi = share(batch, rank, world)
    return global_indices(n, seed, offset, batch)[lo:hi]
