"""`gpuwise gpus`: the GPU table (memory, dense peak TFLOPS, bandwidths) with each row's source."""

from __future__ import annotations

import argparse
import dataclasses

_CONVENTIONS = [
    "peak TFLOPS are dense (vendor sparsity figures halved); fp32 is the non-tensor vector peak",
    "intra-node GB/s: per-GPU aggregate unidirectional GPU-GPU bandwidth (NVLink/Infinity Fabric = "
    "half the bidirectional total; PCIe = one direction of x16)",
    "memory in GiB as a framework sees it; two-GPU boards (K80, M60) are listed per GPU",
    "source: gpuwise/data/gpus.csv (vendor datasheets, cited per row)",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:g}"


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.output import emit_json, print_assumptions, print_table
    from gpuwise.hardware.gpus import all_gpus

    gpus = all_gpus()
    if args.json:
        emit_json({"gpus": [dataclasses.asdict(g) for g in gpus], "assumptions": _CONVENTIONS})
        return 0
    print_table(
        f"GPU table ({len(gpus)} GPUs; dense peaks)",
        ["GPU", "mem GiB", "fp32", "tf32", "bf16", "fp16", "fp8", "HBM GB/s", "GPU-GPU GB/s", "link"],
        [[g.name, _fmt(g.memory_gib), _fmt(g.fp32_tflops), _fmt(g.tf32_tflops), _fmt(g.bf16_tflops),
          _fmt(g.fp16_tflops), _fmt(g.fp8_tflops), _fmt(g.hbm_gbps), _fmt(g.intra_node_gbps), g.interconnect]
         for g in gpus],
    )
    print("Aliases and sources:")
    for g in gpus:
        print(f"  {g.name} ({', '.join(g.aliases) or 'no aliases'}): {g.source}")
    print_assumptions(_CONVENTIONS)
    return 0
