"""Candidate generation against the models it stands on.

- `allowed_plans` (the planner's restricted enumeration) against the memory engineer's
  `feasible_plans`: every plan it returns is one `feasible_plans` returns with the same memory,
  and every allowed (tp, pp, ZeRO) layout `feasible_plans` finds is covered by a plan no heavier
  in recompute.
- `spot_columns` against `estimate.preemption.spot_time` row by row (same model, vectorised),
  and the numpy Poisson quantiles/CDF against scipy.stats to 1e-9.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.estimate import preemption as pre
from gpuwise.estimate.feasible_plans import feasible_plans
from gpuwise.hardware.gpus import get_gpu
from gpuwise.estimate.layout_search import allowed_plans
from gpuwise.estimate.job_space import batch_grid
from gpuwise.plan.job import from_jobspec
from gpuwise.plan.spot import poisson_cdf, poisson_ppf, spot_columns
from gpuwise.workload.jobspec import load_job
from gpuwise.workload.training import TrainingConfig

ROOT = Path(__file__).resolve().parents[1]

JOB = from_jobspec(load_job("examples/llama-3.1-8b-pretrain.yaml"))
HEAVY = {"none": 0, "selective": 1, "op": 1, "full": 2}


@pytest.mark.parametrize("gpu,gpus,gpn,micro", [("H100", 8, 8, 1), ("H100", 16, 8, 2), ("A100-80GB", 32, 8, 1),
                                                ("H200", 12, 4, 2), ("A100-80GB", 4, 4, 1)])
def test_allowed_plans_match_feasible_plans(gpu, gpus, gpn, micro):
    spec = get_gpu(gpu)
    cfg = TrainingConfig(**{**JOB.base.__dict__, "micro_batch": micro})
    mine = allowed_plans(JOB, cfg, spec, gpus, gpn)
    theirs = [(c, m) for c, m in feasible_plans(JOB.model, cfg, spec, gpus, gpn)
              if c.plan.tp in JOB.tp and c.plan.pp in JOB.pp and c.plan.zero in JOB.zero and c.plan.cp == 1]
    index = {(c.plan, c.recompute, c.grad_accum): m.total for c, m in theirs}
    for c, m in mine:
        assert index[(c.plan, c.recompute, c.grad_accum)] == pytest.approx(m.total)
    covered = {(c.plan.tp, c.plan.pp, c.plan.zero): HEAVY[c.recompute] for c, _ in mine}
    for c, _ in theirs:
        k = (c.plan.tp, c.plan.pp, c.plan.zero)
        assert k in covered and covered[k] <= HEAVY[c.recompute]


def test_nothing_fits_on_one_small_gpu():
    cfg = TrainingConfig(**{**JOB.base.__dict__, "micro_batch": 1})
    assert allowed_plans(JOB, cfg, get_gpu("T4"), 1, 1) == []


@settings(max_examples=40, deadline=None)
@given(work=st.floats(0.1, 2000), rate=st.floats(0.0, 0.5), nodes=st.integers(1, 32),
       ckpt=st.floats(0.1, 500), restart=st.floats(0, 0.5), deadline=st.floats(1, 5000))
def test_spot_columns_equal_preemption_model(work, rate, nodes, ckpt, restart, deadline):
    d = spot_columns(np.array([work]), np.array([rate]), np.array([nodes]), np.array([ckpt]),
                     write_gbps=1.0, restart_h=restart, interval_h=None, deadline_h=deadline)
    ck = pre.checkpoint_seconds(ckpt, 1.0, nodes)
    try:
        ref = pre.spot_time(work * 3600, rate, nodes, ck, restart * 3600)
    except Exception:   # restarts cannot keep up: the planner marks the row as never finishing
        assert math.isinf(d.mean_h[0])
        return
    assert d.mean_h[0] == pytest.approx(ref.expected_s / 3600, rel=1e-9)
    assert d.p10_h[0] == pytest.approx(ref.p10_s / 3600, rel=1e-9)
    assert d.p90_h[0] == pytest.approx(ref.p90_s / 3600, rel=1e-9)
    assert d.expected_preemptions[0] == pytest.approx(ref.expected_preemptions, rel=1e-9)
    assert 0.0 <= d.prob[0] <= 1.0
    if deadline * 3600 >= ref.p90_s:
        assert d.prob[0] >= 0.9 - 1e-12


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-6, 5e4), st.sampled_from([0.1, 0.5, 0.9]), st.floats(0, 3))
def test_poisson_matches_scipy(mu, q, frac):
    from scipy.stats import poisson

    assert poisson_ppf(q, mu) == poisson.ppf(q, mu)
    x = frac * mu
    assert poisson_cdf(x, mu) == pytest.approx(poisson.cdf(x, mu), abs=1e-9)


def test_batch_grid():
    assert batch_grid(512, 512) == (512,)
    assert batch_grid(256, 8192) == (256, 512, 1024, 2048, 4096, 8192)
    assert batch_grid(32, 100) == (32, 64, 100)


def _range_job(tmp_path):
    """The pre-training example with a range of global batches (several batches per shape)."""
    text = (ROOT / "examples" / "llama-3.1-8b-pretrain.yaml").read_text()
    path = tmp_path / "range.yaml"
    path.write_text(text.replace("global_batch: 512", "global_batch: [128, 1024]  #")
                    .replace("zero: [1, 2, 3]", "zero: [0, 1, 3]"))
    return load_job(path)


# jobs whose step-time notes hold a configuration's numbers or layout: NF4 dequantisation and offload seconds
# (QLoRA on a foreach hf-trainer; DeepSpeed with activation offload), AsyncTP's 1/tp share (torchtitan)
_NOTE_JOBS = {
    "qlora": "model: llama-3.1-8b\ntraining: {epochs: 1, dataset_samples: 20000, seq_len: 2048, global_batch: [16, 64], "
             "optimizer: paged_adamw8bit, recompute: full, stack: hf-trainer, lora_rank: 16, lora_targets: all-linear, "
             "quantize: nf4, optimizer_impl: foreach}\nparallelism: {tp: [1, 2], pp: [1, 2, 4], zero: [0, 2, 3]}\n"
             "constraints: {gpus: [L4, A10G, L40S, A100-80GB], max_gpus: 8}\n",
    "offload": "model: llama-2-13b\ntraining: {tokens: 1.0e+9, seq_len: 4096, global_batch: [32, 256], recompute: full, "
               "stack: deepspeed, activation_offload: true}\nparallelism: {tp: [1, 2], pp: [1, 2, 5], zero: [1, 2, 3]}\n"
               "constraints: {gpus: [A100-80GB, A10G, L40S], max_gpus: 32, spot: false}\n",
    "asynctp": "model: qwen2.5-7b\ntraining: {tokens: 2.0e+10, seq_len: 8192, global_batch: 256, recompute: op, "
               "stack: torchtitan, float8: true, async_tp: true}\nparallelism: {tp: [1, 2, 4], pp: [1, 2, 3, 4, 6], "
               "zero: [0, 1, 2, 3]}\nconstraints: {gpus: [H100, H200, A100-80GB], max_gpus: 48, spot: false}\n",
}


@pytest.mark.parametrize("example,max_gpus", [("llama-3.1-8b-pretrain.yaml", 64), ("llama-3.1-8b-lora.yaml", None),
                                              ("resnet50-imagenet.yaml", 32), ("range", 32), ("qlora", None),
                                              ("offload", None), ("asynctp", None)])
def test_pruned_search_equals_exhaustive(example, max_gpus, tmp_path):
    """The planner's exact prunings (variants known not to fit, step-time branch and bound) change
    nothing: every shape's best configuration, counts, columns and assumptions equal the exhaustive
    search's, float for float. The step-time assumptions are the chosen configurations' (the QLoRA, offload
    and AsyncTP jobs: those of every configuration timed differed with the pruning)."""
    from gpuwise.hardware.catalog import load_catalog
    from gpuwise.plan.candidates import generate

    if example in _NOTE_JOBS:
        (tmp_path / "job.yaml").write_text(f"name: {example}\n" + _NOTE_JOBS[example])
        spec = load_job(tmp_path / "job.yaml")
    else:
        spec = _range_job(tmp_path) if example == "range" else load_job(ROOT / "examples" / example)
    job = from_jobspec(spec, max_gpus=max_gpus)
    cat = load_catalog()
    fast, slow = generate(job, cat), generate(job, cat, exhaustive=True)
    assert fast.shapes == slow.shapes and fast.options == slow.options
    assert fast.evaluated == slow.evaluated and fast.assumptions == slow.assumptions
    for name in ("off_idx", "opt_idx", "nodes", "spot", "time_h", "time_p10", "time_p90", "cost", "ok"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name), equal_nan=True), name


def test_with_changes_is_replace():
    """The search's fast copy of a TrainingConfig (`with_changes`) is `dataclasses.replace`: equal, same hash,
    the original untouched, unknown fields refused; it relies on TrainingConfig's __init__ only setting fields."""
    import dataclasses

    from gpuwise.workload.training import ParallelPlan, with_changes

    assert not hasattr(TrainingConfig, "__post_init__")
    cfg = TrainingConfig(micro_batch=2, seq_len=4096, lora_rank=8, plan=ParallelPlan(dp=4, zero=3))
    changes = {"grad_accum": 6, "recompute": "full", "plan": ParallelPlan(dp=2, tp=2, sp=True)}
    fast, slow = with_changes(cfg, **changes), dataclasses.replace(cfg, **changes)
    assert type(fast) is TrainingConfig and fast == slow and hash(fast) == hash(slow) and fast.__dict__ == slow.__dict__
    assert cfg.grad_accum == 1 and cfg.recompute == "none"
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.grad_accum = 2
    with pytest.raises(TypeError, match="grad_acum"):
        with_changes(cfg, grad_acum=2)


def test_memory_notes_built_on_first_read():
    """An estimate's assumption lines, built when first read, are the lines `_assumptions` gives, and the same
    tuple on every read, after pickling and after `replace`."""
    import dataclasses
    import pickle

    from gpuwise.estimate import memory
    from gpuwise.workload.training import ParallelPlan

    cfg = TrainingConfig(micro_batch=1, seq_len=8192, grad_accum=4, plan=ParallelPlan(dp=4, pp=2, zero=1))
    spec = memory.stack_model(JOB.space.model, cfg)
    est = memory.estimate_memory(spec, cfg)
    notes = est.notes
    assert isinstance(notes, tuple) and notes and est.notes is notes and est.assumptions == list(notes)
    sem = memory._semantics(cfg.precision, cfg.optimizer, spec.hidden, 1, False)
    assert notes == tuple(memory._assumptions(spec, cfg, sem, False, est.peak_stage, est.peak_phase, "1f1b"))
    fresh = memory._estimate.__wrapped__(spec, cfg, False, True, 1, True)   # not read yet
    assert pickle.loads(pickle.dumps(fresh)) == est and dataclasses.replace(fresh).notes == notes
    assert memory.MemoryEstimate(1, 2, 3, 4, 5, 6, 7).notes == ()


def test_fast_estimate_is_the_dataclass():
    """`memory._new_estimate` (the estimates' constructor without the frozen __init__) gives the object the
    dataclass's __init__ gives: equal, same attributes in the same order (so the same pickle), notes read
    through their descriptor (deferred or not), still frozen."""
    import dataclasses
    import pickle

    from gpuwise.estimate import memory

    values = (1.5, 2.0, 3.0, 4.0, 5.0, 6, 7, 1, ("a", "b"), 0.5, 0.25, 0.125, 0.0625, "optimizer step")
    fast, slow = memory._new_estimate(*values), memory.MemoryEstimate(*values)
    assert fast == slow and list(fast.__dict__.items()) == list(slow.__dict__.items())
    assert pickle.dumps(fast) == pickle.dumps(slow) and fast.required == slow.required
    lazy = memory._new_estimate(*values[:8], lambda: ["x"], *values[9:])
    assert lazy.notes == ("x",) and lazy == dataclasses.replace(slow, notes=("x",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.parameters = 0.0


@pytest.mark.parametrize("field,changes", [("batch-size", {"micro_batch": 0}), ("grad-accum", {"grad_accum": True}),
                                           ("dp", {"plan": "dp0"}), ("cp", {"plan": "cp2.0"})])
def test_check_config_refuses_sizes(field, changes):
    """check_config's fast path (every size a positive int) still refuses a size that is not, naming its field."""
    import dataclasses

    from gpuwise.errors import InputError
    from gpuwise.estimate.memory import check_config
    from gpuwise.workload.training import ParallelPlan

    plans = {"dp0": ParallelPlan(dp=0), "cp2.0": ParallelPlan(cp=2.0)}
    if "plan" in changes:
        changes = {"plan": plans[changes["plan"]]}
    cfg = dataclasses.replace(TrainingConfig(), **changes)
    with pytest.raises(InputError, match=field):
        check_config(JOB.space.model, cfg)
    check_config(JOB.space.model, TrainingConfig())      # the default is fine


def test_micro_step_key_holds_what_the_bound_reads():
    """The step-time bound's memo (`step_time.micro_step_key`) leaves out only fields the micro-step time does not
    read: changing any of them leaves `_micro_step_bound` as it was, float for float, and the bound with a memo
    equals the bound without; changing a field of the key does change the time (the key is not just a label)."""
    import dataclasses

    from gpuwise.estimate import step_time
    from gpuwise.workload.training import ParallelPlan

    spec, gpu = JOB.space.model, get_gpu("H100")
    base = TrainingConfig(micro_batch=2, seq_len=4096, grad_accum=4, recompute="op",
                          plan=ParallelPlan(dp=4, tp=2, pp=2, sp=True, zero=1))
    left_out = {"grad_accum": 9, "optimizer": "sgd", "offload_optimizer": True, "loss_kernel": "chunked",
                "optimizer_impl": "fused", "lora_targets": "all-linear", "async_tp": True,
                "plan": dataclasses.replace(base.plan, dp=16, zero=3, pp_schedule="gpipe")}
    ref = step_time._micro_step_bound(spec, base, gpu)
    for name, value in left_out.items():
        cfg = dataclasses.replace(base, **{name: value})
        assert step_time.micro_step_key(cfg) == step_time.micro_step_key(base), name
        assert step_time._micro_step_bound(spec, cfg, gpu) == ref, name
    memo: dict = {}
    for cfg in (base, dataclasses.replace(base, grad_accum=3), base):
        assert step_time.step_time_lower_bound(spec, cfg, gpu, memo) == step_time.step_time_lower_bound(spec, cfg, gpu)
    assert len(memo) == 1
    for name, value in {"micro_batch": 4, "seq_len": 8192, "recompute": "full", "precision": "fp8",
                        "padding_mask": True, "plan": dataclasses.replace(base.plan, tp=4)}.items():
        cfg = dataclasses.replace(base, **{name: value})
        assert step_time.micro_step_key(cfg) != step_time.micro_step_key(base), name
        assert step_time._micro_step_bound(spec, cfg, gpu) != ref, name


@pytest.mark.parametrize("stack,precision,pp", [("pytorch", "bf16-mixed", 1), ("deepspeed", "bf16-mixed", 2),
                                                ("megatron", "bf16", 4), ("hf-trainer", "fp16-mixed", 2)])
def test_zero_1_and_2_share_a_geometry(stack, precision, pp):
    """memory._Geometry reads the ZeRO stage only as 0 and >= 3, so `_stage_loads` builds one geometry for ZeRO-1
    and ZeRO-2 (`_geometry_zero`): built for each, every stage's fixed terms and numbers are equal."""
    from gpuwise.estimate import memory

    spec = JOB.space.model
    geos = []
    for zero in (1, 2):
        sem = memory._semantics(precision, "adamw", spec.hidden, zero, False)
        geos.append(memory._Geometry(spec, sem, True, 2, 4096, precision, "op", True, 0, None, 2, pp, 1, True, zero,
                                     "eager", "q,v", False, False, False, stack))
    assert memory._geometry_zero(2) == memory._geometry_zero(1) == 1 and memory._geometry_zero(3) == 3
    assert all(geos[0].stage(i) == geos[1].stage(i) for i in range(pp))
    assert {k: v for k, v in vars(geos[0]).items() if k != "_stages"} == \
        {k: v for k, v in vars(geos[1]).items() if k != "_stages"}


def test_model_hash_is_kept_but_never_pickled():
    """ModelSpec keeps its hash after the first call (the estimates' memos hash it ~10^4 times a plan): the same value
    as the fields' hash, equal specs hash equal, and neither a pickle nor a copy carries it (a string's hash
    differs between processes), so an unpickled spec hashes afresh."""
    import copy
    import dataclasses
    import pickle

    from gpuwise.workload.models import load_model

    spec = load_model("llama-3.1-8b")
    fields = tuple(getattr(spec, f.name) for f in dataclasses.fields(spec))
    assert hash(spec) == hash(fields) and spec._hash == hash(fields)
    # the kept hash is not in __dict__: a copy made from it (tests/test_perf_stack_factors.py) takes the fields only
    assert spec.__dict__.keys() == {f.name for f in dataclasses.fields(spec)}
    assert spec.__class__(**{**spec.__dict__, "name": "x"}) == dataclasses.replace(spec, name="x")
    twin = dataclasses.replace(spec)
    assert twin == spec and hash(twin) == hash(spec) and hash(dataclasses.replace(spec, name="x")) != hash(spec)
    for other in (pickle.loads(pickle.dumps(spec)), copy.copy(spec), copy.deepcopy(spec)):
        assert not hasattr(other, "_hash") and other == spec and hash(other) == hash(spec)
    assert dataclasses.asdict(spec) == dataclasses.asdict(twin) and "_hash" not in dataclasses.asdict(spec)
