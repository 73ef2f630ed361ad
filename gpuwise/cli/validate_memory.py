"""`gpuwise validate memory`: the memory estimator against every bundled measured row."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    from gpuwise.validation.memory import validate_memory

    rep = validate_memory()
    if getattr(args, "json", False):
        from gpuwise.cli.output import emit_json

        emit_json({
            "rows": [{"source": r.source, "case": r.case, "status": r.status, "unit": r.unit,
                      "measured": r.measured, "predicted": r.predicted, "error": r.error, "passed": r.passed,
                      "note": r.note} for r in rep.rows],
            "compared": len(rep.errors), "median_abs_error": rep.median_abs_error, "max_abs_error": rep.max_abs_error,
            "target_median_abs_error": 0.08, "meets_target": rep.median_abs_error <= 0.08,
            "not_modelled": sum(r.status == "not modelled" for r in rep.rows),
            "assumptions": list(rep.assumptions)})
        return 0
    from gpuwise.cli.output import print_assumptions, print_table

    def fmt(v):
        return "" if v is None else f"{v:.2f}"

    short = {"megatron_korthikanti2022_via_calculon.csv": "Korthikanti22", "peft_readme_memory_a100_80gb.csv": "PEFT",
             "hf_transformers_docs_bert_large_memory.csv": "HF-docs bert-large"}
    rows, notes = [], []
    for r in rep.rows:
        if r.status == "compared":
            res = f"{100 * r.error:+.1f}%"
        elif r.status == "checked":
            res = "pass" if r.passed else "FAIL"
        else:
            res = "not modelled"
        file, _, rest = r.source.partition(" ")
        if r.note and r.note not in notes:
            notes.append(r.note)
        mark = f" [{notes.index(r.note) + 1}]" if r.note else ""
        rows.append((f"{short.get(file, file)} {rest}", r.case + mark, r.unit, fmt(r.measured), fmt(r.predicted), res))
    print_table("Memory estimator vs measured rows (gpuwise/data/measured)",
                ["row", "case", "unit", "measured", "predicted", "error"], rows,
                justify=["left", "left", "left", "right", "right", "right"])
    print("Notes:")
    for i, n in enumerate(notes, 1):
        print(f"  [{i}] {n}")
    n_nm = sum(r.status == "not modelled" for r in rep.rows)
    print(f"compared rows: {len(rep.errors)}; median |error| {100 * rep.median_abs_error:.1f}% "
          f"(target <= 8%: {'met' if rep.median_abs_error <= 0.08 else 'NOT met'}); "
          f"max |error| {100 * rep.max_abs_error:.1f}%; checked rows: {sum(r.status == 'checked' for r in rep.rows)}; "
          f"not modelled: {n_nm} (reasons in the table)")
    print_assumptions(rep.assumptions)
    return 0
