"""Library half of the job service: Frenzy's prediction (gpuwise.plan.submit) and the job store
(gpuwise.jobqueue.store): no server here."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gpuwise.errors import InputError
from gpuwise.hardware.cluster import load_cluster, make_cluster
from gpuwise.plan.submit import predict_on_cluster, spec_from_preset
from gpuwise.workload.jobspec import load_job, parse_job

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "examples" / "workloads" / "specs"
pytest.importorskip("sqlalchemy")


@pytest.fixture(scope="module")
def cluster():
    return load_cluster(ROOT / "gpuwise" / "data" / "clusters" / "service-default.yaml")


@pytest.mark.parametrize("spec", ["resnet18-cifar10.yaml", "gpt2-finetune.yaml"])
def test_prediction_matches_the_simulated_job_alone_on_the_cluster(cluster, spec):
    """The predicted time is what `gpuwise simulate` (Frenzy policy, ground truth) gives the same job
    alone on the cluster, less the simulator's 30 s start-up: the prediction and the scheduler agree."""
    from gpuwise.policies.registry import make_policy
    from gpuwise.sim.cluster import simulate
    from gpuwise.workload.traces import TraceJob, Workload

    path = str(SPECS / spec)
    pred = predict_on_cluster(load_job(path), cluster)
    c = pred.chosen
    assert c.memory_gib_per_gpu < c.gpu_memory_gib and c.min_gpus <= c.gpus <= c.capacity
    res = simulate(cluster, Workload((TraceJob("j", 0.0, c.gpus, jobspec=path, batch_size=c.global_batch),),
                                     "t", "gpuwise"), make_policy("frenzy"))
    js = res.jobs[0]
    assert (js.allocation.gpu_type, js.allocation.num_gpus) == (c.gpu, c.gpus)
    assert js.finish_s - res.restart_s == pytest.approx(c.time_hours * 3600, rel=0.01)
    fastest = min(o.time_hours for o in pred.feasible)
    assert c.time_hours == fastest
    cheap = predict_on_cluster(load_job(path), cluster, objective="cost").chosen
    assert cheap.cost_usd == min(o.cost_usd for o in pred.feasible)


def test_model_too_big_for_every_gpu_type_names_why(cluster):
    """Llama-3.1-70B with AdamW keeps ~12 bytes per parameter (~850 GB): more than any GPU type of the
    service cluster holds even sharded with ZeRO-3 over all of its GPUs."""
    spec = parse_job({"name": "big", "model": "llama-3.1-70b", "training": {"tokens": 1e9, "seq_len": 4096,
                                                                           "global_batch": 64}})
    pred = predict_on_cluster(spec, cluster)
    assert pred.chosen is None and pred.feasible == []
    assert all("does not fit" in o.reason for o in pred.options)


def test_model_that_needs_sharding_is_predicted_sharded(cluster):
    """Llama-3.1-8B (refused before: "does not fit ... with tp=1, pp=1") fits A100-40GB with ZeRO-3."""
    spec = parse_job({"name": "mid", "model": "llama-3.1-8b", "training": {"tokens": 1e8, "seq_len": 4096,
                                                                          "global_batch": 64},
                      "parallelism": {"zero": [3]}})
    pred = predict_on_cluster(spec, cluster)
    a100 = next(o for o in pred.options if o.gpu.startswith("A100"))
    assert a100.gpus is not None and a100.min_gpus > 1 and "zero3" in a100.layout
    assert a100.memory_gib_per_gpu < a100.gpu_memory_gib


def test_constraints_restrict_gpu_types_and_counts(cluster):
    spec = spec_from_preset("resnet18-cifar10", {"samples": 1e6}, [128, 1024],
                            constraints={"gpus": ["T4"], "max_gpus": 4})
    pred = predict_on_cluster(spec, cluster)
    assert [o.gpu for o in pred.options] == ["T4"] and pred.options[0].capacity == 4 and pred.chosen.gpus <= 4
    with pytest.raises(InputError) as exc:
        predict_on_cluster(spec_from_preset("resnet18-cifar10", {"samples": 1e6}, 128,
                                            constraints={"gpus": ["H100"]}), cluster)
    assert exc.value.field == "constraints.gpus"


def test_preset_form_errors_are_the_job_spec_errors():
    with pytest.raises(InputError) as a:
        spec_from_preset("resnet18-cifar10", {"samples": -1}, 128)
    with pytest.raises(InputError) as b:
        parse_job({"name": "resnet18-cifar10", "model": "resnet18-cifar10",
                   "training": {"samples": -1, "global_batch": 128}})
    assert str(a.value) == str(b.value) and a.value.field == "training.samples"
    with pytest.raises(InputError) as c:
        spec_from_preset("resnet18-cifar10", {"samples": 1, "tokens": 2}, 128)
    assert c.value.field == "amount"


def test_store_hashes_tokens_migrates_idempotently_and_records_each_key_once(tmp_path):
    from gpuwise.jobqueue.admission import admit
    from gpuwise.jobqueue.store import Store

    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    user, token = store.create_token("ann", quota_gpus=4)
    assert store.user_for_token(token) == user and store.user_for_token(token + "x") is None
    Store(url).close()                                        # a second migration run changes nothing
    cluster = make_cluster([("T4", 1, 4)])
    spec = spec_from_preset("resnet18-cifar10", {"samples": 1e5}, 128)
    out, barrier = [], threading.Barrier(40)

    def go(i):
        barrier.wait()
        out.append(admit(store, cluster, user, spec, clock=None, idempotency_key=f"k{i % 10}"))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(out) == 40 and sum(a.created for a in out) == 10
    assert len(store.jobs()) == 10 and len({a.job["id"] for a in out}) == 10
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db"))
    assert token.encode() not in raw                          # only its sha256 is stored
