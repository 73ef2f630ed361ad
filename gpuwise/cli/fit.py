"""`gpuwise fit TRAIN.csv [--predict POINTS.csv] [--form extended|pollux|bottleneck] [--json]`: fit the
step-time model.

Forms: ``extended`` (default), ``pollux`` (the 7-parameter form of Qiao et al. OSDI'21) or
``bottleneck`` (lowest held-out error within the profiled 1-4 nodes, but extrapolates worse); see
``gpuwise validate throughput`` and README section 2.

CSV columns as Pollux's placements.csv: placement (one digit per node = GPUs on it, e.g. 1222),
local_bsz, step_time, sync_time (seconds). Optional column grad_accum (micro-steps per optimizer step,
default 1), or Pollux's accum_steps (extra micro-steps, read as grad_accum = accum_steps + 1).
Instead of placement, num_nodes and num_replicas columns are accepted (as in scalability.csv).
"""

from __future__ import annotations

import argparse

REQUIRED = ("local_bsz", "step_time", "sync_time")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gpuwise.estimate.fits import FORMS

    parser.add_argument("train", help="measured rows: placement,local_bsz,step_time,sync_time")
    parser.add_argument("--predict", metavar="POINTS.csv",
                        help="rows to predict (placement,local_bsz; measured step_time/sync_time only scored)")
    parser.add_argument("--form", choices=FORMS, default="extended",
                        help="model form: extended (default: non-linear compute, node-count term), pollux "
                             "(7 parameters) or bottleneck (across-node all-reduce as a power of GPUs per node)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _read(path: str, need_times: bool):
    import csv
    import io

    from gpuwise.errors import InputError
    from gpuwise.user_files import read_text
    from gpuwise.workload.pollux_traces import parse_placement

    text = read_text(path, "TRAIN.csv" if need_times else "--predict", "CSV of measured rows")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    cols = [c.strip() for c in (reader.fieldnames or [])]
    has_place = "placement" in cols
    has_nr = "num_nodes" in cols and "num_replicas" in cols
    need = list(REQUIRED if need_times else ("local_bsz",))
    missing = [c for c in need if c not in cols]
    if not (has_place or has_nr):
        missing.insert(0, "placement")
    if missing:
        raise InputError(path, ",".join(cols) or "(empty)",
                         f"missing column(s) {', '.join(missing)}; need placement,local_bsz,step_time,sync_time")
    rows = []
    for i, raw in enumerate(reader, start=2):
        r = {k.strip(): (v or "").strip() for k, v in raw.items() if k}
        try:
            if has_place:
                place = r["placement"]
                if not place.isdigit() or sum(int(c) for c in place) == 0:
                    raise ValueError("placement")
                nodes, reps = parse_placement(place)
            else:
                nodes, reps = int(r["num_nodes"]), int(r["num_replicas"])
                place = ""
            bsz = float(r["local_bsz"])
            # one meaning inside gpuwise: micro-steps per optimizer step (Pollux files count the extra ones)
            accum = float(r["grad_accum"]) if r.get("grad_accum") else float(r.get("accum_steps") or 0) + 1.0
            st = float(r["step_time"]) if r.get("step_time") else None
            sy = float(r["sync_time"]) if r.get("sync_time") else None
        except (ValueError, KeyError) as exc:
            raise InputError(f"{path} line {i}", dict(r), f"bad value ({exc}); placement is digits per node, "
                             "times are seconds") from None
        if bsz <= 0 or (need_times and (st is None or st <= 0)):
            raise InputError(f"{path} line {i}", dict(r), "local_bsz and step_time must be > 0")
        rows.append((place, nodes, reps, bsz, accum, st, sy))
    if need_times and len(rows) < 2:
        raise InputError(path, len(rows), "need at least 2 measured rows to fit")
    if not rows:
        raise InputError(path, "no rows", "give at least one row (placement,local_bsz) to predict")
    return rows


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from gpuwise.cli.output import emit_json, print_assumptions, print_table
    from gpuwise.estimate.fits import FORM_ASSUMPTIONS, fit_form, predict

    train = _read(args.train, True)
    pts = _read(args.predict, False) if args.predict else None   # refused before the (slow) fit
    a = np.array([r[1:5] for r in train], float)
    step = np.array([r[5] for r in train], float)
    sync = None if any(r[6] is None for r in train) else np.array([r[6] for r in train], float)
    form = getattr(args, "form", "extended")
    params = fit_form(form, a[:, 0], a[:, 1], a[:, 2], step, sync, a[:, 3])
    pred, _ = predict(params, a[:, 0], a[:, 1], a[:, 2], a[:, 3])
    err = np.abs(pred - step) / step
    out = {"parameters": params.as_dict(),
           "in_sample_error": {"median": float(np.median(err)), "max": float(err.max()), "points": len(train)},
           "form": form,
           "assumptions": [FORM_ASSUMPTIONS[form] + f" fitted on {len(train)} rows of {args.train} "
                           "(soft-L1 loss on log step time, priors tie unobserved terms to the Pollux values)",
                           "_n parameters: replicas across nodes; _r parameters: replicas within one node"]}
    preds = []
    if args.predict:
        b = np.array([r[1:5] for r in pts], float)
        ps, sy = predict(params, b[:, 0], b[:, 1], b[:, 2], b[:, 3])
        ps, sy = np.atleast_1d(ps), np.atleast_1d(sy)
        errs = []
        for r, s, y in zip(pts, ps, sy):
            item = {"placement": r[0], "num_nodes": int(r[1]), "num_replicas": int(r[2]), "local_bsz": r[3],
                    "step_time": float(s), "sync_time": float(y)}
            if r[5]:
                item["measured_step_time"] = r[5]
                item["error"] = abs(float(s) - r[5]) / r[5]
                errs.append(item["error"])
            preds.append(item)
        out["predictions"] = preds
        if errs:
            out["prediction_error"] = {"median": float(np.median(errs)), "max": float(np.max(errs)), "points": len(errs)}
    if args.json:
        emit_json(out)
        return 0
    print_table(f"Step-time model ({form} form)", ["parameter", "value"],
                [(k, f"{v:.6g}") for k, v in out["parameters"].items()], ["left", "right"])
    e = out["in_sample_error"]
    print(f"in-sample error: median {e['median']:.1%}, max {e['max']:.1%} over {e['points']} rows")
    if preds:
        print_table("predictions", ["placement", "local_bsz", "step_time (s)", "sync_time (s)", "measured", "error"],
                    [(p["placement"] or f"{p['num_nodes']}n/{p['num_replicas']}r", f"{p['local_bsz']:g}",
                      f"{p['step_time']:.4f}", f"{p['sync_time']:.4f}",
                      f"{p['measured_step_time']:.4f}" if "measured_step_time" in p else "",
                      f"{p['error']:.1%}" if "error" in p else "") for p in preds])
        if "prediction_error" in out:
            pe = out["prediction_error"]
            print(f"prediction error: median {pe['median']:.1%}, max {pe['max']:.1%} over {pe['points']} rows")
    print_assumptions(out["assumptions"])
    return 0
