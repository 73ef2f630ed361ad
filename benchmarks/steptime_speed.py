"""Step-time model speed: the per-operator roofline against the path it replaced, in the same run.

Baseline = the `main` branch's tree (constant-efficiency step time), extracted with `git archive` into a
temporary folder. Times (best of 3, wall and CPU) `gpuwise plan JOB --json` in a subprocess for both trees,
and in-process the cost of one `analytical_step_time` call of each (llama-3.1-8b, FSDP 8 x CP 2 on H100),
then prints the ratios (roofline / baseline).

    python benchmarks/steptime_speed.py [JOB.yaml] [BASELINE_REF]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "llama-3.1-8b-pretrain.yaml"
CALL = ("from gpuwise.estimate.step_time import analytical_step_time as f; from gpuwise.hardware.gpus import get_gpu;"
        "from gpuwise.workload.models import load_model; from gpuwise.workload.training import *; import time;"
        "m=load_model('llama-3.1-8b'); g=get_gpu('H100'); n=2000; t=time.process_time();"
        "[f(m, TrainingConfig(micro_batch=1 + i % 4, seq_len=8192, grad_accum=8, "
        "plan=ParallelPlan(dp=4, cp=2, zero=3)), g, 8) for i in range(n)];"
        "print((time.process_time()-t)/n*1e6)")


def _run(tree: Path, args: list[str]) -> tuple[float, float]:
    """(wall s, child CPU s) of `python args` with PYTHONPATH=tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                   capture_output=True, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def _best(tree: Path, args: list[str], repeat: int = 3) -> tuple[float, float]:
    runs = [_run(tree, args) for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def main() -> None:
    job = Path(sys.argv[1]) if len(sys.argv) > 1 else JOB
    ref = sys.argv[2] if len(sys.argv) > 2 else "main"
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        plan = ["-m", "gpuwise", "plan", str(job.resolve()), "--json"]
        new_w, new_c = _best(ROOT, plan)
        old_w, old_c = _best(base, plan)
        call_new = float(subprocess.run([sys.executable, "-c", CALL], cwd=ROOT, capture_output=True, text=True,
                                        env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout)
        call_old = float(subprocess.run([sys.executable, "-c", CALL], cwd=base, capture_output=True, text=True,
                                        env={**os.environ, "PYTHONPATH": str(base)}, check=True).stdout)
    print(f"gpuwise plan {job.name} --json, best of 3 (baseline = {ref}):")
    print(f"  roofline  {new_w:6.2f} s wall {new_c:6.2f} s CPU")
    print(f"  baseline  {old_w:6.2f} s wall {old_c:6.2f} s CPU")
    print(f"  ratio     {new_w / old_w:6.2f} wall {new_c / old_c:6.2f} CPU")
    print(f"analytical_step_time per call (CPU us): roofline {call_new:.0f}, baseline {call_old:.0f}, "
          f"ratio {call_new / call_old:.2f}")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
