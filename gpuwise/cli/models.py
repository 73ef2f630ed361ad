"""`gpuwise models`: the bundled model presets with their parameter counts."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from gpuwise.workload.models import active_param_count, list_presets, load_model, param_count, preset_info

    rows = []
    for name in list_presets():
        spec, info = load_model(name), preset_info(name)
        n = param_count(spec)
        rows.append({"name": name, "family": spec.family, "params": n, "active_params": active_param_count(spec),
                     "published_params": info.published_params, "published_source": info.published_source,
                     "diff_pct": None if info.published_params is None else
                     round(100 * (n / info.published_params - 1), 3),
                     "layers": spec.n_layers + spec.n_encoder_layers, "hidden": spec.hidden, "heads": spec.n_heads,
                     "kv_heads": spec.n_kv_heads, "vocab": spec.vocab_size, "max_seq_len": spec.max_seq_len})
    assumptions = ["params: structural count from each preset's config (gpuwise/data/models/*.json); "
                   "published: the official count named in published_source ('-' where none is published: "
                   "llm-foundry's MPT sizes give an architecture only)",
                   "explicit (non-transformer) presets carry their published count and activation bytes per sample"]
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json({"models": rows, "assumptions": assumptions})
        return 0
    from gpuwise.cli.output import print_assumptions, print_table

    def b(n: int) -> str:
        return f"{n / 1e9:.3f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"

    print_table(f"Model presets ({len(rows)})", ["name", "family", "params", "active", "published", "diff %",
                                                  "layers", "hidden", "heads/kv", "vocab"],
                [(r["name"], r["family"], b(r["params"]), b(r["active_params"]),
                  "-" if r["published_params"] is None else b(r["published_params"]),
                  "-" if r["diff_pct"] is None else f"{r['diff_pct']:+.2f}", r["layers"] or "", r["hidden"] or "",
                  f"{r['heads']}/{r['kv_heads']}" if r["heads"] else "", r["vocab"] or "") for r in rows])
    print_assumptions(assumptions)
    return 0
