"""memory_floor (layouts pruned by a two-stage lower bound) against the enumeration it replaced (every
layout's frugal variant estimated in full), same run, cold caches; asserts both give the same floor.

Prints CPU seconds (time.process_time: the machine may be shared) and wall seconds of each path, and
the ratio new/old of CPU time. Both paths use today's estimator, whose per-layer terms are computed
once per stage shape (that alone made the old path ~2x faster than before: 2-3 s CPU per refusal).
The first two cases are the issue-14 refusals (`gpuwise fit-gpus` on a config too large for any GPU).
Usage: python benchmarks/mem_floor.py
"""

from __future__ import annotations

import time

from gpuwise.estimate import feasible_plans as fp
from gpuwise.estimate.memory import _estimate
from gpuwise.estimate.performance import memory_of
from gpuwise.workload.models import load_model
from gpuwise.workload.training import TrainingConfig

CASES = [("llama-3.1-405b", 4096, 131072, 1024), ("llama-3.1-70b", 1, 1_000_000_000, 1024),
         ("llama-3.1-70b", 1, 8192, 1024), ("mixtral-8x7b", 2, 8192, 256), ("llama-3.1-8b", 1, 4096, 64)]


def old_floor(spec, cfg, max_gpus):
    """Every candidate estimated in full; the first with the smallest `required` kept."""
    best = None
    for c in fp._floor_configs(spec, cfg, max_gpus, 8):
        est = memory_of(spec, c)
        if best is None or est.required < best.required:
            best = est
    return best


def timed(fn):
    _estimate.cache_clear()
    fp.memory_floor.cache_clear()
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c, time.perf_counter() - w


def main() -> None:
    print(f"{'case':44s} {'layouts':>7s} {'old cpu s':>9s} {'new cpu s':>9s} {'new/old':>8s} {'old wall':>8s} "
          f"{'new wall':>8s}")
    for model, micro, seq, max_gpus in CASES:
        spec = load_model(model)
        cfg = TrainingConfig(micro_batch=micro, seq_len=seq)
        n = len(fp._floor_configs(spec, cfg, max_gpus, 8))
        old, oc, ow = timed(lambda: old_floor(spec, cfg, max_gpus))
        new, nc, nw = timed(lambda: fp.memory_floor(spec, cfg, max_gpus, 8))
        assert new == old, (model, micro, seq)
        name = f"{model} mb{micro} x {seq} on <= {max_gpus}"
        print(f"{name:44s} {n:7d} {oc:9.3f} {nc:9.3f} {nc / max(oc, 1e-9):8.3f} {ow:8.3f} {nw:8.3f}")


if __name__ == "__main__":
    main()
