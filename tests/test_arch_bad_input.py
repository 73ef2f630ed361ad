"""Bad input to every command: one line on stderr naming the problem, exit code 2, no traceback.

DEVELOPERS.md ("Bad input: one clear line naming the field, the bad value and the fix, exit code 2,
never a traceback") and the "Bad input" items of issues 2-6. The cases run once per module in one
fresh Python process (its own HOME, the repository as working directory) that calls the console
entry `gpuwise.cli.main.main` for each and records its exit code, stdout and stderr: one interpreter
start-up instead of one per case (about 115 start-ups took ~40 s of CPU). An exception escaping
`main` is recorded as its traceback, so it fails the case as before. `test_console_entry_matches`
runs a few cases through the real `python -m gpuwise` as a user would and checks they give the
same result. `expect` is a piece of the message that shows the line names the right field or value
(case-insensitive).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# the module fixture runs every case once: keep its tests on one xdist worker so it is not run twice
pytestmark = pytest.mark.xdist_group("bad_input")

ROOT = Path(__file__).resolve().parent.parent
JOB = "examples/llama-3.1-8b-pretrain.yaml"
RENT = "examples/rent/fig1.yaml"
WORKLOAD = "examples/workloads/small.csv"
PLACEMENTS = "gpuwise/data/pollux/traces/bert/placements.csv"

# bad files, written once into a temporary folder ({B} in the cases)
FILES = {
    "empty.txt": "",
    "malformed.yaml": "model: [unclosed\n  x: :\n",
    "list.yaml": "- just\n- a list\n",
    "broken.json": '{"hidden_size": 4096,',
    "missing_fields.json": '{"model_type": "llama"}',
    "wrongcols.csv": "a,b,c\n1,2,3\n",
    "nonnum.csv": "placement,local_bsz,step_time,sync_time\n1,abc,0.4,0.01\n",
    "headeronly.csv": "placement,local_bsz,step_time,sync_time\n",
    "neg_tokens.yaml": "name: x\nmodel: llama-3.1-8b\ntraining:\n  tokens: -5\n  global_batch: 64\n",
    "unknown_model.yaml": "name: x\nmodel: no-such-model\ntraining:\n  tokens: 1e9\n  global_batch: 64\n",
    "bad_precision.yaml": "name: x\nmodel: llama-3.1-8b\ntraining:\n  tokens: 1e9\n  global_batch: 64\n"
                          "  precision: fp7\n",
    "inf_tokens.yaml": "name: x\nmodel: llama-3.1-8b\ntraining:\n  tokens: .inf\n  global_batch: 64\n",
    "extra_key.yaml": "name: x\nmodel: llama-3.1-8b\ntraining:\n  tokens: 1e9\n  global_batch: 64\nbogus_key: 3\n",
    "rent_neg.yaml": "types:\n  - name: a\n    arrival_rate: -1\n    mean_size: 1\n    speedup: {amdahl: 0.8}\n",
    "rent_bad_speedup.yaml": "types:\n  - name: a\n    arrival_rate: 0.4\n    mean_size: 1\n    speedup: {bogus: 0.8}\n",
    "rent_linear.yaml": "types:\n  - name: a\n    arrival_rate: 0.4\n    mean_size: 1\n    speedup: {linear: 1}\n",
    "rent_budget_text.yaml": "budget: {gpus: lots}\ntypes:\n  - name: a\n    arrival_rate: 0.4\n    mean_size: 1\n"
                             "    speedup: {power: 0.5}\n",
    "cluster_bad_gpu.yaml": "name: c\nnodes:\n  - gpu: NoSuchGPU\n    count: 2\n    gpus_per_node: 4\n",
    "cluster_neg.yaml": "name: c\nnodes:\n  - gpu: T4\n    count: -2\n    gpus_per_node: 4\n",
    "wl_bad_app.csv": "name,time,application,num_replicas,batch_size\nj1,10,nosuchapp,2,64\n",
    "wl_unsorted.csv": "name,time,application,num_replicas,batch_size\nj1,10,bert,2,64\nj2,5,bert,2,64\n",
    "wl_too_big.csv": "name,time,application,num_replicas,batch_size\nj1,10,bert,9999,64\n",
    "wl_nonnum.csv": "name,time,application,num_replicas,batch_size\nj1,abc,bert,2,64\n",
}
BINARY = b"\x00\x01\x02\xff\xfe"

# (id, command line with {B} for the bad-files folder, expected piece of the message)
CASES = [
    # catalog (issue 2: unknown names get the closest valid ones)
    ("catalog-gpu-typo", "catalog --gpu H10", "did you mean H100"),
    ("catalog-cloud-typo", "catalog --cloud awz", "did you mean aws"),
    ("catalog-top-negative", "catalog --top -3", "--top"),
    ("catalog-dir-missing", "catalog --catalog-dir {B}/missing", "catalog-dir"),
    ("catalog-dir-empty", "catalog --catalog-dir {B}/folder", "vms.csv"),
    ("catalog-vms-columns", "catalog --catalog-dir {B}/cat_cols", "missing column"),
    ("catalog-vms-empty", "catalog --catalog-dir {B}/cat_empty", "empty file"),
    ("catalog-vms-binary", "plan examples/llama-3.1-8b-lora.yaml --catalog-dir {B}/cat_binary", "UTF-8"),
    # memory / fit-gpus (issue 2: malformed config names the field; impossible plans)
    ("memory-unknown-model", "memory llama-3.1-9b", "did you mean"),
    ("memory-config-missing", "memory {B}/missing.json", "config.json"),
    ("memory-config-broken", "memory {B}/broken.json", "not valid JSON"),
    ("memory-config-field", "memory {B}/missing_fields.json", "hidden_size"),
    ("memory-config-binary", "memory {B}/binary.bin", "UTF-8"),
    ("memory-batch-zero", "memory llama-3.1-8b --batch-size 0", "batch-size"),
    ("memory-batch-text", "memory llama-3.1-8b --batch-size abc", "--batch-size"),
    ("memory-tp-heads", "memory llama-3.1-8b --tp 3 --gpus 3", "heads"),
    ("memory-pp-layers", "memory llama-3.1-8b --pp 1000 --gpus 1000", "layers"),
    ("memory-precision", "memory llama-3.1-8b --precision fp7", "precision"),
    ("memory-gpu-typo", "memory llama-3.1-8b --gpu A100-90GB", "did you mean A100-80GB"),
    ("fit-gpus-gpu-typo", "fit-gpus llama-3.1-8b --gpu H10", "did you mean H100"),
    # estimate (issue 3: spec errors name the YAML path)
    ("estimate-job-missing", "estimate {B}/missing.yaml --gpu H100 --gpus 8", "file not found"),
    ("estimate-job-folder", "estimate {B}/folder --gpu H100 --gpus 8", "folder"),
    ("estimate-job-binary", "estimate {B}/binary.bin --gpu H100 --gpus 8", "UTF-8"),
    ("estimate-job-empty", "estimate {B}/empty.txt --gpu H100 --gpus 8", "empty"),
    ("estimate-job-malformed", "estimate {B}/malformed.yaml --gpu H100 --gpus 8", "line 2"),
    ("estimate-tokens-negative", "estimate {B}/neg_tokens.yaml --gpu H100 --gpus 8", "training.tokens"),
    ("estimate-unknown-key", "estimate {B}/extra_key.yaml --gpu H100 --gpus 8", "bogus_key"),
    ("estimate-unknown-model", "estimate {B}/unknown_model.yaml --gpu H100 --gpus 8", "no-such-model"),
    ("estimate-gpu-unknown", f"estimate {JOB} --gpu NoSuchGPU --gpus 8", "NoSuchGPU"),
    ("estimate-gpus-zero", f"estimate {JOB} --gpu H100 --gpus 0", "--gpus"),
    ("estimate-nodes-split", f"estimate {JOB} --gpu H100 --gpus 8 --nodes 3", "--nodes"),
    ("estimate-price-negative", f"estimate {JOB} --gpu H100 --gpus 8 --price -1", "--price"),
    ("estimate-flags-no-batch", "estimate --model llama-3.1-8b --gpu H100 --gpus 8", "--batch-size"),
    ("estimate-no-job", "estimate --gpu H100 --gpus 8", "--model"),
    # fit (issue 3: a CSV with missing columns names them)
    ("fit-missing", "fit {B}/missing.csv", "not found"),
    ("fit-folder", "fit {B}/folder", "folder"),
    ("fit-binary", "fit {B}/binary.bin", "UTF-8"),
    ("fit-empty", "fit {B}/empty.txt", "placement"),
    ("fit-wrong-columns", "fit {B}/wrongcols.csv", "local_bsz"),
    ("fit-non-numeric", "fit {B}/nonnum.csv", "abc"),
    ("fit-header-only", "fit {B}/headeronly.csv", "rows"),
    ("fit-predict-columns", f"fit {PLACEMENTS} --predict {{B}}/wrongcols.csv", "placement"),
    # plan (issue 4)
    ("plan-tokens-inf", "plan {B}/inf_tokens.yaml", "training.tokens"),
    ("plan-cloud-unknown", f"plan {JOB} --cloud nocloud", "nocloud"),
    ("plan-gpu-unknown", f"plan {JOB} --gpu NoSuchGPU", "NoSuchGPU"),
    ("plan-max-gpus-zero", f"plan {JOB} --max-gpus 0", "--max-gpus"),
    ("plan-plot-extension", f"plan {JOB} --plot {{B}}/out.txt", ".png"),
    ("plan-plot-no-folder", f"plan {JOB} --plot {{B}}/nodir/out.png", "does not exist"),
    ("plan-export-folder", f"plan {JOB} --export-skypilot {{B}}/folder", "folder"),
    ("plan-objective", f"plan {JOB} --objective fastest", "objective"),
    # deepvm (issue 4)
    ("deepvm-budget-zero", "deepvm --budget 0", "--budget"),
    ("deepvm-data-missing", "deepvm --data {B}/missing", "--data"),
    ("deepvm-data-empty-folder", "deepvm --data {B}/folder", "instances.csv"),
    ("deepvm-data-columns", "deepvm --data {B}/deepvm_cols", "missing column"),
    # rent (issue 5: infeasible budget with the minimum; linear speedup needs a cap)
    ("rent-folder", "rent {B}/folder --budget 2", "folder"),
    ("rent-binary", "rent {B}/binary.bin --budget 2", "UTF-8"),
    ("rent-empty", "rent {B}/empty.txt --budget 2", "empty"),
    ("rent-malformed", "rent {B}/malformed.yaml --budget 2", "YAML"),
    ("rent-rate-negative", "rent {B}/rent_neg.yaml --budget 2", "arrival_rate"),
    ("rent-speedup-kind", "rent {B}/rent_bad_speedup.yaml --budget 2", "amdahl"),
    ("rent-linear-no-cap", "rent {B}/rent_linear.yaml --budget 2", "max_gpus"),
    ("rent-budget-in-file", "rent {B}/rent_budget_text.yaml", "budget"),
    ("rent-budget-text", f"rent {RENT} --budget abc", "--budget"),
    ("rent-no-budget", f"rent {RENT}", "--budget"),
    ("rent-sweep-order", f"rent {RENT} --budget 2 --sweep 3:1:0.5", "--sweep"),
    ("rent-jobs-zero", f"rent {RENT} --budget 2 --simulate --jobs 0", "--jobs"),
    ("rent-billing", f"rent {RENT} --budget 2 --billing fortnight", "--billing"),
    ("rent-instances", f"rent {RENT} --budget 2 --instance-sizes a,b", "--instance-sizes"),
    ("rent-plot-extension", f"rent {RENT} --budget 2 --plot {{B}}/out.txt", ".png"),
    ("rent-plot-folder", f"rent {RENT} --budget 2 --plot {{B}}/folder", "folder"),
    # simulate / compare (issue 6: errors name the row)
    ("simulate-workload-missing", "simulate --workload {B}/missing.csv --policy fifo", "--workload"),
    ("run-workload-missing", "run --cluster examples/run/cluster.yaml --workload {B}/missing.csv --policy fifo",
     "--workload"),
    ("run-unknown-policy", "run --cluster examples/run/cluster.yaml --workload examples/run/workload.csv "
     "--policy nope", "--policy"),
    ("run-preempt-negative", "run --cluster examples/run/cluster.yaml --workload examples/run/workload.csv "
     "--policy fifo --preempt-every -1", "--preempt-every"),
    ("simulate-workload-folder", "simulate --workload {B}/folder --policy fifo", "--workload"),
    ("simulate-workload-binary", "simulate --workload {B}/binary.bin --policy fifo", "UTF-8"),
    ("simulate-workload-empty", "simulate --workload {B}/empty.txt --policy fifo", "header"),
    ("simulate-workload-columns", "simulate --workload {B}/wrongcols.csv --policy fifo", "columns"),
    ("simulate-unknown-app", "simulate --workload {B}/wl_bad_app.csv --policy fifo", "row 1"),
    ("simulate-unsorted", "simulate --workload {B}/wl_unsorted.csv --policy fifo", "row 2"),
    ("simulate-too-many-gpus", "simulate --workload {B}/wl_too_big.csv --policy fifo", "9999"),
    ("simulate-non-numeric", "simulate --workload {B}/wl_nonnum.csv --policy fifo", "row 1"),
    ("simulate-no-jobs", "simulate --workload {B}/wl_header.csv --policy fifo", "job"),
    ("simulate-restart-nan", f"simulate --workload {WORKLOAD} --policy fifo --restart-s nan", "--restart-s"),
    ("simulate-policy-unknown", f"simulate --workload {WORKLOAD} --policy fifi", "fifo"),
    ("simulate-cluster-missing", f"simulate --workload {WORKLOAD} --policy fifo --cluster {{B}}/missing.yaml",
     "--cluster"),
    ("simulate-cluster-malformed", f"simulate --workload {WORKLOAD} --policy fifo --cluster {{B}}/malformed.yaml",
     "YAML"),
    ("simulate-cluster-gpu", f"simulate --workload {WORKLOAD} --policy fifo --cluster {{B}}/cluster_bad_gpu.yaml",
     "nodes[0].gpu"),
    ("simulate-cluster-count", f"simulate --workload {WORKLOAD} --policy fifo --cluster {{B}}/cluster_neg.yaml",
     "nodes[0].count"),
    ("simulate-plot-is-file", f"simulate --workload {WORKLOAD} --policy fifo --plot {{B}}/empty.txt", "empty.txt"),
    ("compare-policy-unknown", f"compare --workload {WORKLOAD} --policy fifo --policy nosuch", "--policy"),
    # listings and the dispatcher
    ("gpus-unknown-flag", "gpus --bogus", "--bogus"),
    ("models-extra-argument", "models llama", "llama"),
    ("unknown-command", "memroy llama-3.1-8b", "did you mean"),
    ("validate-unknown", "validate nothing", "memory"),
    ("estimate-inter-node-zero", f"estimate {JOB} --gpu H100 --gpus 16 --nodes 2 --inter-node-gbps 0",
     "--inter-node-gbps"),
    ("fit-predict-header-only", f"fit {PLACEMENTS} --predict {{B}}/headeronly.csv", "row"),
    ("estimate-price-nan", f"estimate {JOB} --gpu H100 --gpus 8 --price nan", "--price"),
    # job service (issue 15): serve, token, and the client commands (no server needed to fail)
    ("serve-port", "serve --port 70000", "--port"),
    ("serve-db-url", "serve --db nosuchdb://x", "--db"),
    ("serve-ray-address", "serve --backend ray --ray-address 127.0.0.1:1 --db sqlite:///{B}/ray.db", "--ray-address"),
    ("token-user-name", "token create bad/name --db sqlite:///{B}/tok.db", "USER"),
    ("submit-bad-spec", "submit {B}/neg_tokens.yaml", "training.tokens"),
    ("jobs-no-token", "jobs --server http://127.0.0.1:1", "no token: run gpuwise token create"),
    ("cancel-no-token", "cancel abc --server http://127.0.0.1:1", "no token: run gpuwise token create"),
    ("spec-extra-argument", "spec --schema {B}/neg_tokens.yaml", "unrecognized arguments"),
]

@pytest.fixture(scope="module")
def bad_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    for name, text in FILES.items():
        (d / name).write_text(text)
    (d / "wl_header.csv").write_text("name,time,application,num_replicas,batch_size\n")
    (d / "binary.bin").write_bytes(BINARY)
    (d / "folder").mkdir()
    cols = d / "deepvm_cols"
    cols.mkdir()
    for f in ("instances", "scaling_factor_params", "network_saturation", "quotas"):
        (cols / f"{f}.csv").write_text("x,y\n1,2\n")
    for name, content in (("cat_cols", b"x,y\n1,2\n"), ("cat_empty", b""), ("cat_binary", BINARY)):
        (d / name / "aws").mkdir(parents=True)
        (d / name / "aws" / "vms.csv").write_bytes(content)
    return d


def _env(bad: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(bad)}  # no ~/.sky catalogs of the machine running the tests


def _run(args: str, bad: Path) -> subprocess.CompletedProcess:
    """One case through the real console entry, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "gpuwise", *args.format(B=bad).split()], cwd=ROOT, env=_env(bad),
                          capture_output=True, text=True, timeout=120)


# Runs in the child: each case through gpuwise.cli.main.main with its own stdout/stderr, SystemExit as the
# exit code (argparse's refusals), any other exception as its traceback on stderr (exit code 1, as Python's).
_BATCH = """
import contextlib, io, json, sys, traceback
from gpuwise.cli.main import main
out = {}
for cid, argv in json.loads(sys.stdin.read()):
    err, std = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            code = 1
            traceback.print_exc(file=err)
    out[cid] = [code, std.getvalue()[:300], err.getvalue()]
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def results(bad_dir) -> dict[str, subprocess.CompletedProcess]:
    """Every case run once, in one fresh process."""
    cases = [(cid, args.format(B=bad_dir).split()) for cid, args, _ in CASES]
    r = subprocess.run([sys.executable, "-c", _BATCH], input=json.dumps(cases), cwd=ROOT, env=_env(bad_dir),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    recorded = json.loads(r.stdout)
    return {cid: subprocess.CompletedProcess(argv, *recorded[cid]) for cid, argv in cases}


def _check(r: subprocess.CompletedProcess, expect: str) -> None:
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2, (r.returncode, r.stderr, r.stdout[:300])
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("gpuwise"), lines[0]
    assert expect.lower() in lines[0].lower(), lines[0]


@pytest.mark.parametrize("cid,args,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2(results, cid, args, expect):
    _check(results[cid], expect)


@pytest.mark.parametrize("cid", ["catalog-gpu-typo", "memory-batch-text", "unknown-command", "simulate-unsorted"])
def test_console_entry_matches(results, bad_dir, cid):
    """`python -m gpuwise` gives what the in-process run recorded (an argparse refusal, an InputError,
    the dispatcher's own refusal and a file error)."""
    args = next(a for c, a, _ in CASES if c == cid)
    r = _run(args, bad_dir)
    assert (r.returncode, r.stderr) == (results[cid].returncode, results[cid].stderr)


def test_every_command_is_covered():
    """New commands must get bad-input cases here too."""
    from gpuwise.cli.main import COMMANDS

    covered = {args.split()[0] for _, args, _ in CASES}
    assert set(COMMANDS) <= covered, sorted(set(COMMANDS) - covered)
