"""One job model (issue 20): every caller gives the same answer for the same job and shape.

The planner, `estimate`, the policies' goodput tables, the simulator's ground truth and the service's
prediction all ask the job's goodput object (`gpuwise.estimate.goodput.JobGoodput`). These tests
check behaviour, not names: the same layout, memory and step time from each caller, a lone job's
simulated time equal to `estimate`'s, and LLM jobs that need sharding scheduled by every policy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwise.cli.main import main
from gpuwise.estimate.goodput import JobGoodput
from gpuwise.hardware.cluster import load_cluster
from gpuwise.policies.job_model_perf import JobModelPerf
from gpuwise.policies.registry import make_policy
from gpuwise.sim.cluster import simulate
from gpuwise.sim.ground_truth import GroundTruthPerf
from gpuwise.sim.metrics import summarise
from gpuwise.workload.traces import TraceJob, Workload, load_workload

ROOT = Path(__file__).resolve().parents[1]
LLM_CLUSTER = ROOT / "examples" / "clusters" / "llm-h100-h200-a100.yaml"
PRETRAIN = ROOT / "examples" / "llama-3.1-8b-pretrain.yaml"

SPEC = """name: prop
model: {model}
training: {{tokens: 1.0e8, seq_len: {seq}, global_batch: {batch}, precision: bf16-mixed, optimizer: adamw,
           recompute: selective, lora_rank: {lora}}}
parallelism: {{tp: {tp}, pp: {pp}, cp: {cp}, zero: {zero}, zero_shard: {zero_shard}}}
"""


def _estimate_json(capsys, spec: Path, gpu: str, gpus: int) -> dict | None:
    code = main(["estimate", str(spec), "--gpu", gpu, "--gpus", str(gpus), "--json"])
    out = capsys.readouterr().out
    return json.loads(out) if code == 0 else None


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(["gemma-2b", "qwen2.5-7b", "llama-3.1-8b", "mistral-7b"]),
       seq=st.sampled_from([1024, 4096]), batch=st.sampled_from([32, 64, 128]), lora=st.sampled_from([0, 16]),
       tp=st.sampled_from(["[1]", "[1, 2]", "[1, 2, 4, 8]"]), pp=st.sampled_from(["[1]", "[1, 2]"]),
       zero=st.sampled_from(["[0, 3]", "[1, 2, 3]", "[3]", "[1]"]), cp=st.sampled_from(["[1]", "[1, 2]"]),
       zero_shard=st.sampled_from(["[0]", "[4]", "[0, 2, 8]"]),
       shape=st.sampled_from([("H100-80GB-SXM", 8), ("H100-80GB-SXM", 16), ("A100-80GB-SXM", 4), ("L4", 8),
                              ("H100-80GB-SXM", 12), ("A100-80GB-SXM", 5)]))
def test_every_caller_gives_the_same_answer_for_a_shape(tmp_path_factory, capsys, model, seq, batch, lora, tp, pp,
                                                        zero, cp, zero_shard, shape):
    """`estimate` (the CLI), the planner's job, the policies' PerfModel and the simulator's ground truth:
    the same fit, layout, micro-batch, memory and step time on the same job and shape."""
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    gpu, gpus = shape
    path = tmp_path_factory.mktemp("spec") / "job.yaml"
    if zero_shard != "[0]" and "1" not in zero:
        zero_shard = "[0]"          # shard groups need ZeRO 1 (refused otherwise: tested below)
    path.write_text(SPEC.format(model=model, seq=seq, batch=batch, lora=lora, tp=tp, pp=pp, cp=cp, zero=zero,
                                zero_shard=zero_shard))
    gpn = min(8, gpus)          # `estimate`'s default node: up to 8 GPUs
    nodes = -(-gpus // gpn)
    est = _estimate_json(capsys, path, gpu, gpus)
    planner = from_jobspec(load_job(str(path))).goodput.shape(gpu, gpn, nodes, gpus).best
    job = TraceJob("p", 0.0, gpus, batch_size=batch, jobspec=str(path))
    policy = JobModelPerf(gpus_per_node={gpu: gpn}).spec_option(job, gpu, gpus, nodes, batch, gpn)
    truth = GroundTruthPerf()
    rate = float(truth.specs.spec_rate(job, gpu, gpus, nodes, batch, gpn))
    if planner is None:        # nothing fits (or holds the batch): every caller says so
        assert est is None and policy is None and rate == 0.0
        return
    assert est is not None and est["fits"]
    got = est["plan"]
    assert (got["dp"], got["tp"], got["pp"], got["cp"], got["zero"], got["zero_shard"]) == \
        (planner.plan.dp, planner.plan.tp, planner.plan.pp, planner.plan.cp, planner.plan.zero, planner.plan.zero_shard)
    assert (est["micro_batch"], est["grad_accum"], est["global_batch"]) == \
        (planner.micro_batch, planner.grad_accum, planner.global_batch)
    assert est["step_time_s"] == pytest.approx(planner.step_time_s, rel=1e-12)
    assert est["memory_gib"]["required"] == pytest.approx(planner.memory_required_gib, abs=0.051)
    assert est["checkpoint_gb"] == pytest.approx(planner.checkpoint_gb, rel=1e-6)
    assert policy.config == planner.config and policy.step_time_s == planner.step_time_s
    assert rate == pytest.approx(planner.goodput, rel=1e-12)


LONG = """name: long-context
model: llama-3.1-8b
training: {{tokens: 2.0e8, seq_len: 65536, global_batch: 8, precision: bf16-mixed, recompute: full}}
parallelism: {{tp: [1], pp: [1], cp: {cp}, zero: [3]}}
"""


def test_a_long_context_job_runs_with_the_context_parallelism_its_spec_allows(tmp_path, capsys):
    """64k-token Llama-3.1-8B on 8 H100: no layout fits without context parallelism (estimate says which field
    to open); with parallelism.cp the planner, `estimate`, the policies and the simulator's ground truth pick the
    same cp > 1 layout, and a lone job under FIFO runs it for `estimate`'s time."""
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    short, long_ = tmp_path / "short.yaml", tmp_path / "long.yaml"
    short.write_text(LONG.format(cp="[1]"))
    long_.write_text(LONG.format(cp="[1, 2, 4, 8]"))
    assert main(["estimate", str(short), "--gpu", "H100", "--gpus", "8"]) == 1
    assert "parallelism.cp" in capsys.readouterr().err
    est = _estimate_json(capsys, long_, "H100", 8)
    assert est is not None and est["plan"]["cp"] > 1
    planner = from_jobspec(load_job(str(long_))).goodput.shape("H100-80GB-SXM", 8, 1, 8).best
    job = TraceJob("long", 0.0, 8, batch_size=8, jobspec=str(long_), gpu_type="H100-80GB-SXM")
    policy = JobModelPerf(gpus_per_node={"H100-80GB-SXM": 8}).spec_option(job, "H100-80GB-SXM", 8, 1, 8, 8)
    assert planner.plan.cp == policy.config.plan.cp == est["plan"]["cp"]
    assert est["step_time_s"] == pytest.approx(planner.step_time_s, rel=1e-12) == policy.step_time_s
    res = simulate(load_cluster(str(LLM_CLUSTER)), Workload((job,), "t", "gpuwise"), make_policy("fifo"), restart_s=30.0)
    j = res.jobs[0]
    assert f"cp{est['plan']['cp']}" in j.allocation.layout
    assert j.finish_s - j.submitted_s == pytest.approx(est["compute_hours"] * 3600.0 + 30.0, rel=1e-9)


def test_lone_job_under_fifo_takes_estimates_time_on_64_h100(capsys):
    """Llama-3.1-8B pre-training (needs ZeRO sharding) alone under FIFO on the 64 H100 it asks for:
    the simulated JCT is `estimate`'s compute time on that shape plus the simulator's stated start-up
    (exact), and within 3% of `estimate`'s time to target, which also counts on-demand checkpoint writes
    (the simulator does not write checkpoints)."""
    est = _estimate_json(capsys, PRETRAIN, "H100", 64)
    cluster = load_cluster(str(LLM_CLUSTER))
    job = TraceJob("pre", 0.0, 64, batch_size=512, jobspec=str(PRETRAIN), gpu_type="H100-80GB-SXM")
    res = simulate(cluster, Workload((job,), "t", "gpuwise"), make_policy("fifo"), restart_s=30.0)
    j = res.jobs[0]
    jct = j.finish_s - j.submitted_s
    assert j.allocation.num_gpus == 64 and j.allocation.gpu_type == "H100-80GB-SXM"
    # the allocation carries the layout it runs with: `estimate`'s layout for that shape
    p = est["plan"]
    assert j.allocation.layout.startswith(f"dp{p['dp']}") and f"zero{p['zero']}" in j.allocation.layout
    assert f"micro {est['micro_batch']} x accum {est['grad_accum']}" in j.allocation.layout
    assert jct == pytest.approx(est["compute_hours"] * 3600.0 + 30.0, rel=1e-9)
    assert abs(jct / (est["time_to_target_hours"] * 3600.0) - 1) < 0.03


def test_service_prediction_matches_estimate_on_the_chosen_shape(capsys):
    """`serve`'s prediction for the README example on the LLM cluster (it was refused with 409: "does
    not fit on H200-SXM with tp=1, pp=1, zero=1") is within 3% of `estimate` on its chosen type,
    count and batch, and names the layout."""
    from gpuwise.plan.submit import predict_on_cluster
    from gpuwise.workload.jobspec import load_job

    pred = predict_on_cluster(load_job(str(PRETRAIN)), load_cluster(str(LLM_CLUSTER)))
    ch = pred.chosen
    assert ch is not None and ch.gpus >= 8 and ch.layout and ch.memory_gib_per_gpu < ch.gpu_memory_gib
    est = _estimate_json(capsys, PRETRAIN, ch.gpu, ch.gpus)
    assert est["global_batch"] == ch.global_batch
    assert abs(ch.time_hours / est["time_to_target_hours"] - 1) < 0.03


@pytest.fixture(scope="module")
def small_stream(tmp_path_factory):
    """Four LLM jobs that need sharding (8B and 70B, pre-training and LoRA) on the LLM cluster."""
    specs = ROOT / "examples" / "workloads" / "specs"
    d = tmp_path_factory.mktemp("stream")
    lines = [f"  - {{name: pre8, time: 0, num_gpus: 32, jobspec: {specs}/llama-3.1-8b-pretrain-2b.yaml, batch_size: 256}}",
             f"  - {{name: lora70, time: 300, num_gpus: 16, jobspec: {specs}/llama-3.1-70b-lora.yaml, batch_size: 64}}",
             f"  - {{name: pre70, time: 600, num_gpus: 64, jobspec: {specs}/llama-3.1-70b-pretrain-2b.yaml, batch_size: 256}}",
             f"  - {{name: lora8, time: 900, num_gpus: 8, jobspec: {specs}/llama-3.1-8b-lora.yaml, batch_size: 64}}"]
    (d / "w.yaml").write_text("jobs:\n" + "\n".join(lines) + "\n")
    return load_workload(str(d / "w.yaml"))


@pytest.mark.parametrize("name", ["fifo", "elastic-dp", "pollux", "frenzy", "sia", "milp"])
def test_a_stream_of_sharded_llm_jobs_completes_under_every_policy(name, small_stream):
    cluster = load_cluster(str(LLM_CLUSTER))
    res = simulate(cluster, small_stream, make_policy(name))
    assert summarise(res)["jobs_completed"] == len(small_stream.jobs)
    for js in res.jobs:   # every job ran on a shape its goodput object says fits
        assert js.status == "done"


def test_policies_get_goodput_tables_and_decision_time_excludes_them(small_stream):
    """Model evaluation (the goodput tables) is timed apart from the policy's decision."""
    m = summarise(simulate(load_cluster(str(LLM_CLUSTER)), small_stream, make_policy("frenzy")))
    assert m["mean_model_ms"] > 0 and m["rounds"] > 0
    assert "mean_decision_ms" in m and m["max_decision_ms"] >= 0


def test_goodput_table_rows_are_the_objects_answers():
    """A policy's goodput table is the goodput object's `at_batch` answer per (count, batch)."""
    good = JobGoodput.from_jobspec(str(ROOT / "examples" / "workloads" / "specs" / "llama-3.1-8b-lora.yaml"))
    table = good.table("H100-80GB-SXM", 16, 8, (32, 64, 128))
    for g in (1, 2, 8, 16):
        for j, b in enumerate((32, 64, 128)):
            opt = good.at_batch("H100-80GB-SXM", 8, g, b)
            assert table[g - 1, j] == (opt.goodput if opt else 0.0)
    assert table[7].max() > table[0].max() > 0        # 8 GPUs beat one


def test_a_fixed_global_batch_stays_fixed_or_its_rounding_is_flagged():
    """Issue 23: `global_batch: 512` must stay 512 wherever a layout holds it; a shape on which no
    allowed layout divides it (12 or 24 GPUs) may round it, and the option says so."""
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    good = from_jobspec(load_job(str(PRETRAIN))).goodput
    for gpn, nodes in ((8, 1), (8, 2), (8, 4)):
        opt = good.shape("H100-80GB-SXM", gpn, nodes).best
        assert opt.global_batch == 512 and not opt.batch_rounded
    for gpn, nodes in ((4, 3), (8, 3)):
        opt = good.shape("H100-80GB-SXM", gpn, nodes).best
        assert opt.global_batch != 512 and opt.batch_rounded
        assert abs(opt.global_batch / 512 - 1) <= 0.25


def test_a_fixed_batch_no_layout_holds_runs_rounded_everywhere(capsys):
    """A review found `estimate` rounding a fixed batch on 24 GPUs while the policies' exact search
    gave rate 0, so FIFO held 24 GPUs forever. Now every caller rounds it the same way, flagged."""
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    good = from_jobspec(load_job(str(PRETRAIN))).goodput
    planned = good.shape("H100-80GB-SXM", 8, 3).best
    asked = good.at_batch("H100-80GB-SXM", 8, 24, 512)
    assert planned.batch_rounded and asked.batch_rounded and asked.config == planned.config
    est = _estimate_json(capsys, PRETRAIN, "H100", 24)
    assert est["global_batch"] == planned.global_batch
    job = TraceJob("pre", 0.0, 24, batch_size=512, jobspec=str(PRETRAIN), gpu_type="H100-80GB-SXM")
    res = simulate(load_cluster(str(LLM_CLUSTER)), Workload((job,), "t", "gpuwise"), make_policy("fifo"),
                   restart_s=30.0)
    j = res.jobs[0]
    assert j.status == "done" and j.finish_s == pytest.approx(est["compute_hours"] * 3600.0 + 30.0, rel=1e-9)


def test_the_service_backend_and_the_simulator_start_a_job_on_the_same_layout():
    """The job service's sim backend and the simulator start jobs through one function: the allocation
    carries the goodput object's layout in both, and the API's allocation JSON shows it."""
    from gpuwise.jobqueue.backend import SimBackend
    from gpuwise.jobqueue.record import alloc_from_json, alloc_json
    from gpuwise.policies.base import Allocation, JobState

    cluster = load_cluster(str(LLM_CLUSTER))
    job = TraceJob("pre", 0.0, 16, batch_size=512, jobspec=str(PRETRAIN), gpu_type="H100-80GB-SXM")
    js = JobState(job, 0.0, 1.0)
    js.allocation = alloc = Allocation("H100-80GB-SXM", ((0, 8), (1, 8)), 512)
    backend = SimBackend(cluster)
    backend.launch(js, alloc, 0.0)
    want = backend.perf.specs.spec_layout(job, "H100-80GB-SXM", 16, 2, 512, 8)
    assert want and js.allocation.layout == want and js.rates[0] > 0
    assert alloc_json(js.allocation)["layout"] == want and alloc_from_json(alloc_json(js.allocation)) == alloc


def test_context_parallelism_a_spec_cannot_use_is_refused_naming_the_field(tmp_path, capsys):
    """cp that does not divide the sequence, cp for a model without sequences, cp on the Ray runtime (data
    parallel only): exit 2 naming parallelism.cp, not a "does not fit" answer."""
    bad = tmp_path / "c3.yaml"
    bad.write_text(LONG.format(cp="[3]"))
    assert main(["estimate", str(bad), "--gpu", "H100", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "parallelism.cp" in err and "divide training.seq_len" in err
    cnn = tmp_path / "cnn.yaml"
    cnn.write_text("name: c\nmodel: resnet50\ntraining: {samples: 1.0e+6, global_batch: 256}\nparallelism: {cp: [2]}\n")
    assert main(["plan", str(cnn)]) == 2
    assert "parallelism.cp" in capsys.readouterr().err
    from gpuwise.errors import InputError
    from gpuwise.hardware.cluster import load_cluster
    from gpuwise.runtime.jobspecs import runnable_spec
    from gpuwise.workload.jobspec import parse_job

    spec = parse_job({"name": "t", "model": "tiny-llama", "training": {"samples": 1e4, "global_batch": 16},
                      "parallelism": {"cp": [2]}})
    with pytest.raises(InputError, match="cp"):
        runnable_spec(spec, load_cluster(str(ROOT / "examples" / "run" / "one-h200.yaml")))


HYBRID = """name: hybrid-zero
model: llama-3.1-8b
training: {{tokens: 1.0e9, seq_len: 4096, global_batch: 64, precision: bf16-mixed, recompute: full}}
parallelism: {{tp: [1], pp: [1], zero: {zero}, zero_shard: {zero_shard}}}
"""


def test_a_hybrid_zero1_group_a_spec_allows_is_what_every_caller_runs(tmp_path, capsys):
    """parallelism.zero_shard (InternEvo's zero1 group, which `estimate --zero-shard` answers): the planner,
    `estimate`, the policies and the simulator run the same dp32-zero1/8 layout for the same step time, which is
    `estimate --model`'s for that fixed configuration; a lone job under FIFO takes `estimate`'s time."""
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    path = tmp_path / "h.yaml"
    path.write_text(HYBRID.format(zero="[1]", zero_shard="[8]"))
    est = _estimate_json(capsys, path, "H100", 32)
    assert est is not None and (est["plan"]["zero"], est["plan"]["zero_shard"], est["plan"]["dp"]) == (1, 8, 32)
    planner = from_jobspec(load_job(str(path))).goodput.shape("H100-80GB-SXM", 8, 4, 32).best
    job = TraceJob("h", 0.0, 32, batch_size=64, jobspec=str(path), gpu_type="H100-80GB-SXM")
    policy = JobModelPerf(gpus_per_node={"H100-80GB-SXM": 8}).spec_option(job, "H100-80GB-SXM", 32, 4, 64, 8)
    assert planner.plan.zero_shard == policy.config.plan.zero_shard == 8
    assert est["step_time_s"] == pytest.approx(planner.step_time_s, rel=1e-12) == policy.step_time_s
    fixed = ["estimate", "--model", "llama-3.1-8b", "--gpu", "H100", "--gpus", "32", "--batch-size",
             str(est["micro_batch"]), "--grad-accum", str(est["grad_accum"]), "--seq-len", "4096", "--precision",
             "bf16-mixed", "--zero", "1", "--zero-shard", "8", "--recompute", est["recompute"], "--json"]
    assert main(fixed) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(est["step_time_s"], rel=1e-12)
    res = simulate(load_cluster(str(LLM_CLUSTER)), Workload((job,), "t", "gpuwise"), make_policy("fifo"), restart_s=30.0)
    j = res.jobs[0]
    assert "zero1/8" in j.allocation.layout
    assert j.finish_s - j.submitted_s == pytest.approx(est["compute_hours"] * 3600.0 + 30.0, rel=1e-9)


def test_the_zero_shard_hint_is_one_function_estimate_and_plan_render(tmp_path):
    """layouts.zero_shard_hint: per shape only where no group divides a layout's dp x cp there (8 GPUs: dp 8, no 3;
    6 GPUs: dp 6 takes a group of 3), over every shape whenever the whole group is left out; '' once 0 is allowed."""
    from gpuwise.estimate.layouts import zero_shard_hint
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    def space(groups: str):
        path = tmp_path / f"g{len(groups)}.yaml"
        path.write_text(HYBRID.format(zero="[1]", zero_shard=groups))
        return from_jobspec(load_job(str(path))).space

    three = space("[3]")
    assert zero_shard_hint(three, 8, 8).startswith("parallelism.zero_shard [3] divides no layout's dp x cp on 8 GPUs")
    assert zero_shard_hint(three, 6, 8) == ""
    assert zero_shard_hint(three).startswith("ZeRO 1 was tried only where a group of parallelism.zero_shard [3]")
    whole = space("[0, 3]")
    assert zero_shard_hint(whole, 8, 8) == zero_shard_hint(whole) == ""


def test_a_shard_group_a_spec_cannot_use_is_refused_naming_the_field(tmp_path, capsys):
    """zero_shard without ZeRO 1, for a model without transformer layers, on the Ray runtime: exit 2 naming
    parallelism.zero_shard (or the runtime's parallelism line), not "does not fit"."""
    bad = tmp_path / "z3.yaml"
    bad.write_text(HYBRID.format(zero="[3]", zero_shard="[8]"))
    assert main(["estimate", str(bad), "--gpu", "H100", "--gpus", "32"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "parallelism.zero_shard" in err and "ZeRO 1" in err
    three = tmp_path / "z1g3.yaml"        # valid, but no group of 3 divides dp 8: the answer names the field
    three.write_text(HYBRID.format(zero="[1]", zero_shard="[3]"))
    assert main(["estimate", str(three), "--gpu", "H100", "--gpus", "8"]) == 1
    assert "parallelism.zero_shard [3] divides no layout" in capsys.readouterr().err
    big = tmp_path / "z1g3-70b.yaml"      # `plan` names the groups too when nothing fits
    big.write_text(HYBRID.format(zero="[1]", zero_shard="[3]").replace("llama-3.1-8b", "llama-3.1-70b")
                   + "constraints: {gpus: [H100], max_gpus: 16}\n")
    assert main(["plan", str(big)]) == 1
    assert "parallelism.zero_shard [3]" in capsys.readouterr().out
    cnn = tmp_path / "cnn.yaml"
    cnn.write_text("name: c\nmodel: resnet50\ntraining: {samples: 1.0e+6, global_batch: 256}\n"
                   "parallelism: {zero: [1], zero_shard: [4]}\n")
    assert main(["plan", str(cnn)]) == 2
    assert "parallelism.zero_shard" in capsys.readouterr().err
    from gpuwise.errors import InputError
    from gpuwise.runtime.jobspecs import runnable_spec
    from gpuwise.workload.jobspec import parse_job

    spec = parse_job({"name": "t", "model": "tiny-llama", "training": {"samples": 1e4, "global_batch": 16},
                      "parallelism": {"zero": [1], "zero_shard": [2]}})
    with pytest.raises(InputError, match="zero_shard"):
        runnable_spec(spec, load_cluster(str(ROOT / "examples" / "run" / "one-h200.yaml")))


def test_the_answer_does_not_depend_on_the_order_of_the_allowed_groups(tmp_path):
    """zero_shard [0, 4] and [4, 0] allow the same layouts, so the goodput search gives the same best plan (a cache
    keyed without the group once kept whichever came first); a group of all dp x cp ranks is the whole group, and a
    layout whose ZeRO-1 buffers need a heavier recompute under accumulation is found with it."""
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    best = {}
    for groups in ("[0, 4]", "[4, 0]", "[16]"):
        path = tmp_path / f"g{len(best)}.yaml"
        path.write_text(HYBRID.format(zero="[1]", zero_shard=groups))
        best[groups] = from_jobspec(load_job(str(path))).goodput.shape("H100-80GB-SXM", 8, 2, 16).best
    a, b, whole = best.values()
    assert a is not None and (a.plan, a.step_time_s, a.config) == (b.plan, b.step_time_s, b.config)
    assert whole is not None and whole.plan.zero_shard == 0
    path = tmp_path / "four.yaml"
    path.write_text(HYBRID.format(zero="[1]", zero_shard="[0]"))
    four = from_jobspec(load_job(str(path))).goodput.shape("H100-80GB-SXM", 4, 1, 4).best
    assert four is not None and four.config.recompute != "none" and four.global_batch == 64
