"""feasible_plans (pruned) against a brute-force enumeration of the same plan space, same run.

Prints wall times for a cold cache and the ratio brute/pruned, plus the memoised repeat.
Usage: python benchmarks/mem_plans.py
"""

from __future__ import annotations

import time
from dataclasses import replace
from itertools import product

from gpuwise.estimate import feasible_plans as fp
from gpuwise.estimate.memory import _estimate, estimate_memory
from gpuwise.hardware.gpus import get_gpu
from gpuwise.workload.models import load_model
from gpuwise.workload.training import ParallelPlan, TrainingConfig

CASES = [("llama-3.1-70b", "H100", 64), ("llama-3.1-405b", "H100", 256), ("mixtral-8x7b", "A100-80GB", 32),
         ("llama-3.1-8b", "L4", 16)]


def brute(spec, cfg, gpu, gpus):
    out = []
    for tp, pp, cp, dp in fp._layouts(spec, cfg, gpus, 8):
        for zero, rec in product(range(4), ("none", "selective", "full")):
            sp = tp > 1                       # the frameworks' default, as feasible_plans searches
            if zero and dp == 1:
                continue
            c = replace(cfg, recompute=rec, grad_accum=max(cfg.grad_accum, pp),
                        plan=ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, sp=sp, zero=zero))
            est = estimate_memory(spec, c)
            if est.fits(gpu):
                out.append((c, est))
    return out


def main() -> None:
    cfg = TrainingConfig(micro_batch=1, seq_len=4096, flash_attention=False)
    print(f"{'case':34s} {'plans':>6s} {'brute s':>8s} {'pruned s':>9s} {'ratio':>6s} {'memoised s':>11s}")
    for model, gpu_name, gpus in CASES:
        spec, gpu = load_model(model), get_gpu(gpu_name)
        _estimate.cache_clear()
        t = time.perf_counter()
        b = brute(spec, cfg, gpu, gpus)
        tb = time.perf_counter() - t
        _estimate.cache_clear()
        fp._feasible.cache_clear()
        t = time.perf_counter()
        p = fp.feasible_plans(spec, cfg, gpu, gpus)
        tp = time.perf_counter() - t
        t = time.perf_counter()
        fp.feasible_plans(spec, cfg, gpu, gpus)
        tm = time.perf_counter() - t
        assert {(c.plan, c.recompute) for c, _ in p} == {(c.plan, c.recompute) for c, _ in b}
        print(f"{model + ' on ' + str(gpus) + ' x ' + gpu_name:34s} {len(p):6d} {tb:8.4f} {tp:9.4f} "
              f"{tb / max(tp, 1e-9):6.1f} {tm:11.6f}")


if __name__ == "__main__":
    main()
