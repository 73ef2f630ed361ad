"""What is live at the peak of a real training step on a GPU, by the line of code that allocated it.

Where `gpu_measure` finds the model and the GPU apart, this says which tensors make the difference: one
warm-up step (the optimizer state exists), then one step under the caching allocator's history
(``torch.cuda.memory._record_memory_history``). Replaying that history gives the moment of the step's
peak and the blocks alive then; each block is attributed to the innermost frame of gpuwise code (or of
torch, when no gpuwise frame is on its stack) that asked for it. Blocks alive before the step
(parameters, optimizer state) are the ``before step`` line.

    python -m gpuwise.validation.gpu_peak --config llama-3.2-1b,1,32768,bf16-mixed,full,0,,   # needs CUDA

A `--config` is a grid entry as gpu_measure writes it: model, micro-batch, sequence, precision,
recompute, LoRA rank, quantize, levers (``loss_kernel=chunked;compile=1``).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys

GIB = 2 ** 30


def peak_index(events: list[dict]) -> tuple[int, int]:
    """(index of the event at which allocated bytes peak, those bytes) over one allocator history;
    a block counts from its ``alloc`` until its ``free_requested`` (what max_memory_allocated counts)."""
    cur = peak = 0
    at = -1
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            cur += e["size"]
            if cur > peak:
                peak, at = cur, i
        elif e["action"] == "free_requested":
            cur -= e["size"]
    return at, peak


def live_at(events: list[dict], index: int) -> list[dict]:
    """The blocks allocated during the history and still alive at event ``index``."""
    live: dict[int, dict] = {}
    for e in events[: index + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_requested":
            live.pop(e["addr"], None)
    return list(live.values())


def site(frames: list[dict]) -> str:
    """Where a block was asked for: the innermost gpuwise frame, else the innermost torch frame."""
    for key in ("gpuwise/", "torch/"):
        for f in frames:
            if key in f.get("filename", ""):
                name = f["filename"].split(key, 1)[1]
                return f"{key}{name}:{f.get('line')} {f.get('name')}"
    return "(no Python frame)"


def by_site(blocks: list[dict], top: int = 20) -> list[tuple[str, float, int]]:
    """(site, GiB, blocks) of the largest sites."""
    size: dict[str, int] = collections.Counter()
    count: dict[str, int] = collections.Counter()
    for b in blocks:
        s = site(b.get("frames", []))
        size[s] += b["size"]
        count[s] += 1
    return [(s, size[s] / GIB, count[s]) for s, _ in size.most_common(top)]


def diagnose(entry: tuple, device: str = "cuda") -> dict:
    """The peak of one grid entry's step: bytes before the step, the step's live blocks by site, and
    the stack of the allocation that set the peak."""
    import torch

    from gpuwise.validation.gpu_measure import build, config, release, train_step
    from gpuwise.workload.models import load_model

    name, micro, seq, precision, recompute, lora, quantize, levers = entry
    spec, cfg = load_model(name), config(micro, seq, precision, recompute, lora, quantize, levers)
    torch.cuda.set_device(0)
    model, opts, hooks = build(spec, cfg, device)
    ids = torch.randint(0, spec.vocab_size, (micro, seq), device=device)
    for _ in range(2 if cfg.compile else 1):
        train_step(model, opts, cfg, ids)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=500_000, stacks="python")
    train_step(model, opts, cfg, ids)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = snap["device_traces"][0]
    at, peak = peak_index(events)
    out = {"entry": list(entry), "max_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
           "before_step_gib": before / GIB, "step_peak_gib": peak / GIB, "events": len(events),
           "live_at_peak": [{"site": s, "gib": round(g, 4), "blocks": n} for s, g, n in by_site(live_at(events, at))],
           "peak_set_by": [f"{f.get('filename', '').split('site-packages/')[-1]}:{f.get('line')} {f.get('name')}"
                           for f in events[at].get("frames", [])[:12]] if at >= 0 else []}
    del model, opts
    release(hooks)
    return out


def parse_entry(text: str) -> tuple:
    name, micro, seq, precision, recompute, lora, quantize, levers = (text.split(",") + [""] * 8)[:8]
    return name, int(micro), int(seq), precision, recompute, int(lora or 0), quantize or None, levers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuwise.validation.gpu_peak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", required=True, help="a grid entry (see the module doc)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_peak: needs a CUDA GPU (torch sees none here)", file=sys.stderr)
        return 2
    for text in args.config:
        print(json.dumps(diagnose(parse_entry(text))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
