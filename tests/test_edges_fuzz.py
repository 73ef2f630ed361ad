"""Fuzzing every command's flags and input files (issue 14).

Hypothesis draws a command, a positional input (a real example, a truncated copy, binary bytes, an
empty file, random text, a missing path, a YAML of extreme values) and up to three of the command's
own flags (read from its argparse parser, so new flags are fuzzed too) with values from valid choices
to extremes (0, -1, 1e30, -1e9, nan, inf, junk, huge whole numbers). Every run must:
  - exit 0, 1 or 2 (0 answered, 1 no feasible answer, 2 bad input), never with an exception,
  - finish within a per-run alarm (no hang),
  - not exit 0 when the input is known to be invalid (a missing, empty or binary input file, junk for
    a number, nan/inf for a numeric flag, an unknown flag).
Runs are in-process (the console entry `gpuwise.cli.main.main`), in a scratch folder so no output
lands in the repository. Examples are bounded and derandomised for CI; set GPUWISE_FUZZ_EXAMPLES=2000
to fuzz longer with fresh randomness. Failures found are kept in tests/data/fuzz_corpus.json and
replayed by `test_corpus_case`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gpuwise.cli.main import COMMANDS, _Parser, main

# commands that run until stopped or start a cluster (a server, a Ray run): their bad-input cases live in
# test_arch_bad_input.py; a fuzzed valid invocation of them would run past the per-case time limit
LONG_RUNNING = {"serve", "run"}

# one xdist worker holds the scratch folder (and the working directory it switches to)
pytestmark = pytest.mark.xdist_group("fuzz")

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "data" / "fuzz_corpus.json"
EXAMPLES = int(os.environ.get("GPUWISE_FUZZ_EXAMPLES", "0"))
ALARM_S = 30          # a run longer than this is a hang (the external probe allows 60 s)

# Positional inputs per command: valid examples (relative to the repository) that get corrupted
VALID_FILES = {
    "plan": "examples/llama-3.1-8b-pretrain.yaml", "estimate": "examples/resnet50-imagenet.yaml",
    "rent": "examples/rent/fig1.yaml", "fit": "gpuwise/data/pollux/traces/bert/placements.csv",
}
NAMES = ["llama-3.1-8b", "resnet50", "gpt2", "llama-3.1-405b", "lama-3.1-8b", "H100", "x" * 300, "", "-", "🙂"]
NUMBERS = ["0", "1", "2", "8", "-1", "1e5", "1e12", "1e30", "-1e9", "1e308", "0.5", "3.7", "9" * 25]
BAD_NUMBERS = ["nan", "inf", "-inf", "abc", "", "1,5", "0x10"]
# files written into the scratch folder ({name: bytes}); "invalid" ones must never give exit 0
BINARY = bytes(range(256)) * 4
EXTREME_JOB = (b"name: x\nmodel: llama-3.1-8b\ntraining:\n  tokens: 1e30\n  global_batch: 1000000000\n"
               b"  seq_len: 100000000\ndeadline_hours: 1e-9\nbudget_usd: 1e-9\n")
INVALID_FILES = {"empty.yaml": b"", "binary.bin": BINARY, "missing.yaml": None}


def _parser(command: str) -> argparse.ArgumentParser:
    import importlib

    p = _Parser(prog=f"gpuwise {command}")
    importlib.import_module(f"gpuwise.cli.{COMMANDS[command][0]}").add_arguments(p)
    return p


def _flags(command: str) -> list[argparse.Action]:
    return [a for a in _parser(command)._actions if a.option_strings and a.dest != "help"]


def _positional(command: str) -> argparse.Action | None:
    return next((a for a in _parser(command)._actions if not a.option_strings), None)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A scratch folder holding corrupted inputs; runs happen inside it with HOME pointing there."""
    d = tmp_path_factory.mktemp("fuzz")
    for name, content in INVALID_FILES.items():
        if content is not None:
            (d / name).write_bytes(content)
    (d / "extreme.yaml").write_bytes(EXTREME_JOB)
    for cmd, rel in VALID_FILES.items():
        data = (ROOT / rel).read_bytes()
        (d / f"{cmd}-valid{Path(rel).suffix}").write_bytes(data)
        (d / f"{cmd}-half{Path(rel).suffix}").write_bytes(data[: len(data) // 2])
        (d / f"{cmd}-cut{Path(rel).suffix}").write_bytes(data[: len(data) // 5])
    (d / "random.txt").write_text("placement,local_bsz\n\x00\x01 ;; ::: [[[\n")
    old_home, old_cwd = os.environ.get("HOME"), os.getcwd()
    os.environ["HOME"] = str(d)
    os.chdir(d)
    yield d
    os.chdir(old_cwd)
    if old_home is not None:
        os.environ["HOME"] = old_home


def _run(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one in-process run; an exception or a hang fails the test."""
    out, err = io.StringIO(), io.StringIO()

    def hang(signum, frame):
        raise TimeoutError(f"gpuwise {' '.join(argv)} ran over {ALARM_S} s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(ALARM_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:   # argparse's own refusals and --help
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()


def check(argv: list[str], invalid: bool) -> None:
    code, out, err = _run(argv)
    assert code in (0, 1, 2), (argv, code, err[-500:])
    assert "Traceback" not in err and "Traceback" not in out, (argv, err[-2000:])
    if code == 2 and argv:   # (no command at all prints the usage)
        assert err.strip() and len(err.strip().splitlines()) == 1, (argv, err[-1000:])
    if invalid:
        assert code != 0, ("invalid input answered with exit 0", argv, out[-500:])


@st.composite
def invocations(draw, scratch: Path):
    """(argv, known_invalid) for one random run."""
    command = draw(st.sampled_from(sorted(set(COMMANDS) - LONG_RUNNING)))
    argv, invalid = [command], False
    pos = _positional(command)
    if pos is not None:
        if pos.choices:
            slow = {"throughput"}   # a full validation run (minutes); its bad-input paths are covered
            argv.append(draw(st.sampled_from(sorted(set(pos.choices) - slow) + ["nothing"])))
            invalid = argv[-1] == "nothing"
        elif command in VALID_FILES or command == "estimate":
            suffix = Path(VALID_FILES[command]).suffix
            kind = draw(st.sampled_from(["valid", "valid", "half", "cut", "extreme", "empty", "binary",
                                         "missing", "random"]))
            name = {"extreme": "extreme.yaml", "empty": "empty.yaml", "binary": "binary.bin",
                    "missing": "missing.yaml", "random": "random.txt"}.get(kind, f"{command}-{kind}{suffix}")
            argv.append(str(scratch / name))
            invalid = kind in ("empty", "binary", "missing")
        else:
            argv.append(draw(st.sampled_from(NAMES)))
            invalid = argv[-1] in ("", "-", "🙂", "x" * 300)
    flags = _flags(command)
    for action in draw(st.lists(st.sampled_from(flags), max_size=3, unique_by=lambda a: a.dest)) if flags else []:
        opt = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append(opt)
            continue
        numeric = action.type in (int, float)
        if action.choices:
            value = draw(st.sampled_from(list(action.choices) + ["bogus"]))
            invalid |= value == "bogus"
        elif numeric:
            value = draw(st.sampled_from(NUMBERS + BAD_NUMBERS))
            invalid |= value in BAD_NUMBERS
        else:
            value = draw(st.sampled_from(NAMES + NUMBERS + [str(scratch / "binary.bin"), str(scratch / "out.png"),
                                                            str(scratch / "missing.yaml"), str(scratch)]))
        argv += [f"{opt}={value}"]   # `--x=-1e9` keeps argparse from reading values as options
    if draw(st.integers(0, 19)) == 0:
        argv.append("--bogus-flag")
        invalid = True
    return argv, invalid


@pytest.mark.slow
def test_fuzz_every_command(scratch):
    @settings(max_examples=EXAMPLES or 60, deadline=None, derandomize=not EXAMPLES, database=None,
              suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate, Phase.shrink])   # no 'explain': its tracing is slow
    @given(invocations(scratch))
    def fuzz(case):
        argv, invalid = case
        check(argv, invalid)

    fuzz()


def _corpus() -> list[dict]:
    return json.loads(CORPUS.read_text()) if CORPUS.exists() else []


@pytest.mark.parametrize("case", _corpus(), ids=[c["id"] for c in _corpus()])
def test_corpus_case(scratch, case):
    """Failures the fuzzer found (and the issue's probe listed), replayed; {S} is the scratch folder."""
    argv = [a.replace("{S}", str(scratch)).replace("{R}", str(ROOT)) for a in case["argv"]]
    check(argv, case["invalid"])
