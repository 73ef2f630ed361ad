"""`gpuwise` entry point.

Each sub-command lives in its own module under `gpuwise.cli` exposing
``add_arguments(parser)`` and ``run(args) -> int``. Only the module of the command being run
is imported, so `gpuwise memory ...` does not pay for the simulator's or the planner's imports.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import re
import sys

# '-5', '-.5', '-1e9', '-inf', '-nan': values, not options
_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.I)

# command name -> (module under gpuwise.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "spec": ("spec", "the job spec: an annotated example YAML (--schema: its JSON schema)"),
    "catalog": ("catalog", "list cloud GPU offerings, cheapest per GPU-hour first"),
    "gpus": ("gpus", "list the GPU table (memory, peak TFLOPS, bandwidths, sources)"),
    "models": ("models", "list model presets with parameter counts"),
    "memory": ("memory", "per-GPU peak training memory of a configuration"),
    "fit-gpus": ("fit_gpus", "fewest GPUs and the parallel plan that fit, per GPU type"),
    "estimate": ("estimate", "step time, throughput, MFU, time and cost of a job"),
    "fit": ("fit", "fit the Pollux step-time model to measured rows"),
    "plan": ("plan", "what to rent for one training job: ranked configurations"),
    "deepvm": ("deepvm", "DeepVM spot + on-demand cluster under an hourly budget"),
    "rent": ("rent", "optimal rental widths for a stream of jobs under a GPU budget"),
    "simulate": ("simulate", "simulate a scheduling policy on a cluster and workload"),
    "compare": ("compare", "compare scheduling policies side by side"),
    "run": ("run", "run a policy for real: elastic PyTorch training on Ray"),
    "validate": ("validate", "validate estimators against measured data"),
    "serve": ("serve", "run the job service: HTTP API, scheduler and dashboard"),
    "token": ("token", "create an API token for a user of the job service"),
    "submit": ("submit", "submit a job spec to a gpuwise server"),
    "jobs": ("jobs", "list your jobs on a gpuwise server"),
    "cancel": ("cancel", "cancel a job on a gpuwise server"),
}


EXIT_CODES = ("exit codes: 0 answered; 1 valid input but no feasible answer (the binding constraint and the "
              "nearest feasible option are printed); 2 bad input (one line naming the field, the value and the fix)")


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line with exit code 2.

    Integer flags accept the float notation the help writes (`--jobs 1e5`), and values such as
    `-1e9` are read as (negative) numbers, so the command's own check names the field and the fix."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("epilog", EXIT_CODES)
        super().__init__(*args, **kwargs)
        from gpuwise.cli.argtypes import whole_number

        self.register("type", int, whole_number)   # every `type=int` flag, groups and sub-parsers included
        self._negative_number_matcher = _NUMBER

    def error(self, message: str) -> None:  # noqa: D401
        sys.stderr.write(f"gpuwise {self.prog.split()[-1]}: {message}\n")
        raise SystemExit(2)


def _top_help() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = ["usage: gpuwise COMMAND [options]   (gpuwise COMMAND --help for its flags)", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines + ["", EXIT_CODES])


def _single_threaded_blas() -> None:
    """Load numpy with one OpenBLAS thread, unless the user chose a number (OPENBLAS_NUM_THREADS set) or numpy
    is loaded already. At import OpenBLAS starts a thread per core that spins for work (on 2 cores ~0.1 s of
    CPU for `import numpy` alone; `gpuwise plan` on the README example 1.01 -> 0.84 s CPU, 0.93 -> 0.84 s
    wall), while gpuwise's arrays are small (thousands of elements): numbers are the same either way. Only
    this process: the variable is removed again, so what a command starts (Ray workers, training) gets the
    user's environment."""
    import os

    if "OPENBLAS_NUM_THREADS" in os.environ or "numpy" in sys.modules:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401  (OpenBLAS reads the variable when it loads)
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


# one-shot searches whose process needs no cycle collector (`_without_cycle_collection`)
NO_CYCLE_COLLECTION = ("plan",)


def _without_cycle_collection() -> None:
    """Turn Python's cycle collector off for the rest of a one-shot search process (NO_CYCLE_COLLECTION). The
    planner allocates ~10^6 short-lived objects without reference cycles (configurations, estimates, tuples),
    freed by reference counting either way; the collector's ~250 passes, and the one at exit, re-scan everything
    the imports made: 3% of `gpuwise plan`'s instructions on the README example (cachegrind, 5.98 G -> 5.81 G),
    more of its wall time (the scans miss the caches), the same answer and the same peak RSS. Only a process of
    its own: a caller's main([...]) keeps its collector."""
    gc.disable()


def main(argv: list[str] | None = None) -> int:
    if argv is None:            # a process of its own (not a caller's main([...]))
        if sys.argv[1:2] and sys.argv[1] in NO_CYCLE_COLLECTION:
            _without_cycle_collection()
        _single_threaded_blas()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # no command: usage on stderr, bad input
        sys.stderr.write(_top_help() + "\n")
        return 2
    if argv[0] in ("-h", "--help"):
        print(_top_help())
        return 0
    if argv[0] == "--version":
        from gpuwise import __version__

        print(__version__)
        return 0
    name = argv[0]
    if name not in COMMANDS:
        from gpuwise.errors import did_you_mean

        sys.stderr.write(f"gpuwise: unknown command {name!r}; {did_you_mean(name, COMMANDS)}\n")
        return 2
    module = importlib.import_module(f"gpuwise.cli.{COMMANDS[name][0]}")
    parser = _Parser(prog=f"gpuwise {name}", description=COMMANDS[name][1])
    module.add_arguments(parser)
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="human output: also print every assumption behind the answer (--json always has them)")
    args = parser.parse_args(argv[1:])
    from gpuwise.cli.output import set_verbose

    set_verbose(args.verbose)
    from gpuwise.errors import Infeasible, InputError

    try:
        return int(module.run(args) or 0)
    except Infeasible as exc:  # valid input, nothing feasible: the binding constraint and the nearest option
        sys.stderr.write(f"gpuwise {name}: {exc}\n")
        if getattr(args, "json", False):     # a --json caller parses stdout: the same answer as an object
            from gpuwise.cli.output import emit_json

            emit_json({"infeasible": {"binding": exc.field, "value": exc.value, "fix": exc.fix, "message": str(exc)}})
        return 1
    except InputError as exc:
        sys.stderr.write(f"gpuwise {name}: {exc}\n")
        return 2
    except FileNotFoundError as exc:
        sys.stderr.write(f"gpuwise {name}: file not found: {exc.filename}; check the path\n")
        return 2
    # Last line of defence for files a loader opened without gpuwise.user_files: a folder, an
    # unreadable or binary file the user named is still bad input (one line, exit 2), not a crash.
    except (IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError) as exc:
        what = "exists and is not a folder" if isinstance(exc, FileExistsError) else exc.strerror
        sys.stderr.write(f"gpuwise {name}: cannot use {exc.filename}: {what}; check the path\n")
        return 2
    except UnicodeDecodeError as exc:
        sys.stderr.write(f"gpuwise {name}: an input file is not UTF-8 text (byte {exc.start}); "
                         "give a text CSV/YAML/JSON file\n")
        return 2
    except BrokenPipeError:  # e.g. `gpuwise catalog | head`
        return 0
    except MemoryError:   # a size the checks let through but this machine cannot hold: still one line
        sys.stderr.write(f"gpuwise {name}: the request needs more memory than this machine has; "
                         "reduce the sizes given (jobs, tokens, sequence length, GPU counts)\n")
        return 2
    except OSError as exc:   # after BrokenPipeError (a subclass); e.g. a name too long to be a path ("File name too long")
        sys.stderr.write(f"gpuwise {name}: cannot use {str(exc.filename)[:60]!r}: {exc.strerror or exc}; "
                         "check the name or path\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
