"""`gpuwise spec`: the job spec's reference -- an annotated example (YAML) or the JSON schema."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schema", action="store_true",
                        help="print the JSON schema of a job spec instead of the annotated example")


def run(args: argparse.Namespace) -> int:
    from gpuwise.workload.jobspec_doc import annotated_example, json_schema

    if args.schema:
        from gpuwise.cli.output import emit_json

        emit_json(json_schema())
    else:
        print(annotated_example(), end="")
    return 0
