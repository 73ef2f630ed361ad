"""`gpuwise submit JOB.yaml`: send a job spec to a gpuwise server; prints its id and the prediction."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB.yaml", help="job spec (the schema of gpuwise plan)")
    parser.add_argument("--server", metavar="URL", default=None,
                        help="server (default: $GPUWISE_SERVER, the config file, http://127.0.0.1:8765)")
    parser.add_argument("--json", action="store_true", help="print the server's JSON answer")


def _render(res: dict) -> None:
    from gpuwise.cli.output import print_assumptions

    c = res["prediction"]["chosen"]
    print(f"job {res['id']} {res['state']}: predicted {c['gpus']} x {c['gpu']} "
          f"({c['memory_gib_per_gpu']:.1f} GiB per GPU needed, batch {c['global_batch']}), "
          f"{c['time_hours']:.2f} h" + (f", ${c['cost_usd']:,.2f}" if c["cost_usd"] is not None else ""))
    print_assumptions(res["prediction"]["assumptions"])


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.service_call import answer
    from gpuwise.user_files import read_text
    from gpuwise.workload.jobspec import load_job

    load_job(args.job)     # the same one-line error as gpuwise plan, before any network
    text = read_text(args.job, "JOB", "job spec YAML")
    return answer("submit", args, "POST", "/v1/jobs", _render, content=text.encode(),
                  content_type="application/yaml")
