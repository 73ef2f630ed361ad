"""`gpuwise plan JOB --json`, start-up included, against a baseline revision measured in the same run.

The baseline is another commit of this repository (default: the parent of the plan-speed work, #21),
exported with `git archive` into a temporary folder and run with its own tree first on PYTHONPATH. Each
round runs the baseline and then the working tree, one after the other (so both see the same machine
load), and the summary takes the minimum over the rounds of each: wall seconds and CPU seconds (user +
sys of the child process, which other processes' load inflates less than wall time), and the median of
each side's rounds on a second line (new/base of the medians; on a shared machine the median says how
typical the minimum is). The two outputs must be byte-identical (the planner's answer does not depend
on how fast it is computed).

    python benchmarks/plan_cli_speed.py [--base REV] [--rounds N] [JOB.yaml ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = ("examples/llama-3.1-8b-pretrain.yaml", "examples/llama-3.1-8b-lora.yaml", "examples/resnet50-imagenet.yaml")
BASE = "6b18361"   # main before the plan-speed commits


def export(rev: str, dest: Path) -> Path:
    """The tree of ``rev`` under ``dest`` (git archive: the repository itself is not touched)."""
    archive = dest / "base.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "archive", rev], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as t:
        t.extractall(dest / "tree", filter="data")
    return dest / "tree"


def run_once(tree: Path, job: str) -> tuple[float, float, bytes]:
    """(wall s, CPU s, stdout) of one `gpuwise plan JOB --json` with ``tree`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "gpuwise", "plan", str(ROOT / job), "--json"], cwd=tree, env=env,
                         capture_output=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode not in (0, 1):
        raise SystemExit(f"{tree}: exit {out.returncode}: {out.stderr.decode()[-400:]}")
    return wall, cpu, out.stdout


def compare(base: Path, job: str, rounds: int) -> None:
    times: dict[str, list[tuple[float, float]]] = {"base": [], "new": []}
    outs: dict[str, bytes] = {}
    for _ in range(rounds):
        for name, tree in (("base", base), ("new", ROOT)):
            wall, cpu, outs[name] = run_once(tree, job)
            times[name].append((wall, cpu))
    for stat, pick in (("min", min), ("median", statistics.median)):
        (bw, bc), (nw, nc) = ((pick(w for w, _ in times[k]), pick(c for _, c in times[k])) for k in ("base", "new"))
        print(f"{Path(job).name:32} {stat:6} base {bw:5.2f} s wall {bc:5.2f} s CPU | new {nw:5.2f} s wall "
              f"{nc:5.2f} s CPU | new/base: wall {nw / bw:.2f}, CPU {nc / bc:.2f} | "
              f"same --json output: {outs['base'] == outs['new']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jobs", nargs="*", default=list(JOBS))
    ap.add_argument("--base", default=BASE, help=f"baseline revision (default {BASE})")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"min and median of {args.rounds} alternating rounds per side; baseline {args.base}; "
          f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r} "
          "(1: every run compiles gpuwise's sources, as on this project's machines)")
    with tempfile.TemporaryDirectory() as tmp:
        base = export(args.base, Path(tmp))
        for job in args.jobs:
            compare(base, job, args.rounds)
    print(f"load average after the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
