"""Jobs described by a job-spec YAML in our own workload format (issue 6 scope 1: "ground-truth
job speed ... from the shared performance model for jobs described by a spec").

Their truth in the simulator is the job's goodput object (`gpuwise.estimate.goodput.JobGoodput`: the
planner's layout and batch search, the spec's noise scale and amount): a lone job's simulated run
time equals its time to target (exact up to float rounding, 1e-9 relative).
"""

from pathlib import Path

import pytest

from gpuwise.errors import InputError
from gpuwise.estimate.goodput import JobGoodput
from gpuwise.hardware.cluster import load_cluster, pollux_cluster
from gpuwise.policies.registry import POLICIES, make_policy
from gpuwise.sim.cluster import simulate
from gpuwise.sim.ground_truth import GroundTruthPerf
from gpuwise.sim.metrics import summarise
from gpuwise.workload.traces import TraceJob, Workload, load_workload

MIX = "examples/workloads/jobspec-mix.yaml"
GPT2 = "examples/workloads/specs/gpt2-finetune.yaml"
HETERO = "examples/clusters/hetero-t4-v100-a100.yaml"


def test_mix_reads_spec_jobs_with_paths_and_default_batch():
    w = load_workload(MIX)
    jobs = {j.name: j for j in w.jobs}
    assert jobs["gpt2-a"].jobspec == GPT2 and not jobs["gpt2-a"].rigid
    assert jobs["gpt2-a"].batch_size == 64
    assert jobs["resnet18-a"].batch_size == 128          # the spec's smallest global batch
    assert jobs["cifar10-a"].jobspec is None and jobs["rigid-a"].rigid


def test_ground_truth_rate_is_the_goodput_object():
    """Progress rate on (4 T4 on one node, batch 64) = 1 / the goodput object's time to target at that
    batch, which is also what the planner's search gives that shape."""
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    job = TraceJob("g", 0.0, 4, batch_size=64, jobspec=GPT2)
    perf = GroundTruthPerf(pollux_cluster())
    rate = float(perf.rates(job, "T4", 4, 1, 64)[0])
    good = JobGoodput.from_jobspec(GPT2, inter_node_gbps=pollux_cluster().inter_node_gbps)
    opt = good.at_batch("T4", 4, 4, 64, nodes=1)
    # gpt2 fits 8 sequences per T4 (14.75 GiB as PyTorch sees it; the float32 loss tensors of the 50k
    # vocabulary are ~0.6 GiB per sequence), so batch 64 on 4 GPUs takes 2 micro-steps
    assert (opt.grad_accum, opt.micro_batch, opt.global_batch) == (2, 8, 64)
    assert 1.0 / rate == pytest.approx(opt.train_hours * 3600.0, rel=1e-9)
    lo, hi, limit = perf.batch_range(job, "T4")
    assert (lo, hi) == (16, 256) and limit >= 1
    # the planner's own search on that shape, with the batch fixed at 64, chooses the same configuration
    spec = load_job(GPT2).model_copy(deep=True)
    spec.training.global_batch = 64
    planned = from_jobspec(spec, inter_node_gbps=pollux_cluster().inter_node_gbps).goodput.shape("T4", 4, 1).best
    assert (planned.config, planned.step_time_s) == (opt.config, opt.step_time_s)


def test_lone_spec_job_runs_for_the_model_time():
    job = TraceJob("g", 0.0, 8, batch_size=256, jobspec=GPT2)  # 32 per GPU > 8: accumulation
    cl = pollux_cluster()
    res = simulate(cl, Workload((job,), "t", "gpuwise"), make_policy("fifo"), restart_s=0.0)
    jct = res.jobs[0].finish_s - res.jobs[0].submitted_s
    opt = JobGoodput.from_jobspec(GPT2, inter_node_gbps=cl.inter_node_gbps).at_batch("T4", 4, 8, 256, nodes=2)
    assert opt.grad_accum == 4
    assert jct == pytest.approx(opt.train_hours * 3600.0, rel=1e-9)
    assert any("goodput object" in a for a in summarise(res)["assumptions"])


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_completes_the_mix_on_the_heterogeneous_cluster(name):
    w = load_workload(MIX)
    m = summarise(simulate(load_cluster(HETERO), w, make_policy(name)))
    assert m["jobs_completed"] == len(w) == 7


XL = ("name: xl\nmodel: gpt2-xl\ntraining: {tokens: 1.0e6, seq_len: 512, global_batch: [8, 64], "
      "precision: fp16-mixed, optimizer: adamw, noise_scale: 64}\nparallelism: {tp: [1], pp: [1], zero: [0]}\n")


@pytest.fixture(scope="module")
def xl_workload(tmp_path_factory):
    spec = tmp_path_factory.mktemp("xl") / "xl.yaml"
    spec.write_text(XL)
    return Workload((TraceJob("xl", 0.0, 2, batch_size=8, jobspec=str(spec)),), "t", "gpuwise")


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_spec_job_that_fits_one_type_runs_there(name, xl_workload):
    """gpt2-xl with AdamW (~25 GiB of model states), data parallel without sharding (the spec allows
    only ZeRO-0), fits the A100-40GB only: every policy must plan it there. Before, pooled policies planned it on the largest type (T4) and left it pending,
    rigid ones started it on a T4 at zero speed, and the rest crashed on its empty batch range."""
    res = simulate(load_cluster(HETERO), xl_workload, make_policy(name))
    assert summarise(res)["jobs_completed"] == 1
    assert res.jobs[0].allocation.gpu_type == "A100-40GB-SXM"


def test_elastic_beats_rigid_on_the_mix():
    """Spec jobs take part in batch/GPU choices: the elastic DP's mean JCT is below FIFO's."""
    w = load_workload(MIX)
    cl = load_cluster(HETERO)
    el = summarise(simulate(cl, w, make_policy("elastic-dp")))
    ff = summarise(simulate(cl, w, make_policy("fifo")))
    assert el["mean_jct_s"] < ff["mean_jct_s"]


def _write(tmp_path, line):
    f = tmp_path / "w.yaml"
    f.write_text("jobs:\n  - " + line + "\n")
    return f


def test_bad_spec_rows_name_the_row(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nmodel: gpt2\ntraining: {tokens: -5, seq_len: 128, global_batch: 8}\n")
    cases = [
        ("{name: a, time: 0, num_gpus: 1, jobspec: nope.yaml}", "row 1 column jobspec"),
        ("{name: a, time: 0, num_gpus: 1, jobspec: s.yaml}", "training.tokens"),
        (f"{{name: a, time: 0, num_gpus: 1, jobspec: {GPT2}, application: ncf}}", "row 1 column jobspec"),
    ]
    for line, needle in cases:
        with pytest.raises(InputError) as e:
            load_workload(_write(tmp_path, line.replace(GPT2, str(Path(GPT2).resolve()))))
        assert needle in str(e.value) and "\n" not in str(e.value)


def test_spec_that_fits_no_gpu_of_the_cluster(tmp_path):
    """Llama-3.1-70B needs ~840 GB of model states: more than the 64 T4s of the Pollux cluster hold
    with any layout. (Llama-3.1-8B now fits there with ZeRO-3, as the planner says.)"""
    big = tmp_path / "big.yaml"
    big.write_text(Path("examples/llama-3.1-8b-pretrain.yaml").read_text().replace("model: llama-3.1-8b",
                                                                                  "model: llama-3.1-70b"))
    w = load_workload(_write(tmp_path, f"{{name: big, time: 0, num_gpus: 4, jobspec: {big}}}"))
    with pytest.raises(InputError, match="row 1 column jobspec.*fits on none of T4"):
        simulate(pollux_cluster(), w, make_policy("fifo"))


def test_own_format_application_job_without_batch_uses_the_reference(tmp_path):
    """An own-format application job with no batch_size runs at the app's reference batch (the
    smallest validated one, Pollux M0: cifar10 128) instead of failing in the simulator."""
    w = load_workload(_write(tmp_path, "{name: a, time: 0, num_gpus: 2, application: cifar10}"))
    assert w.jobs[0].batch_size == 128
    assert summarise(simulate(pollux_cluster(), w, make_policy("fifo")))["jobs_completed"] == 1


@pytest.mark.parametrize("name", ["fifo", "frenzy", "elastic-dp"])
def test_spec_job_that_needs_sharding_runs_sharded(name, tmp_path):
    """The same job allowed to shard (ZeRO-3) also fits T4s: the policies and the simulator see the
    planner's layouts, so the job may run there, and where it runs its layout fits the GPU."""
    from gpuwise.estimate.performance import memory_of
    from gpuwise.hardware.gpus import get_gpu

    spec = tmp_path / "xl.yaml"
    spec.write_text(XL.replace("zero: [0]", "zero: [3]"))
    w = Workload((TraceJob("xl", 0.0, 4, batch_size=8, jobspec=str(spec)),), "t", "gpuwise")
    good = JobGoodput.from_jobspec(str(spec))
    assert good.best("T4", 4, 1) is None and good.best("T4", 4, 4) is not None   # needs >= 2 T4s, sharded
    res = simulate(load_cluster(HETERO), w, make_policy(name))
    assert summarise(res)["jobs_completed"] == 1
    a = res.jobs[0].allocation
    opt = good.at_batch(a.gpu_type, load_cluster(HETERO).max_gpus_per_node(a.gpu_type), a.num_gpus, a.batch_size,
                        nodes=a.num_nodes)
    assert opt is not None and memory_of(good.space.model, opt.config).fits(get_gpu(a.gpu_type))
