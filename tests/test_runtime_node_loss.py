"""Losing a node of a multi-node Ray cluster (issue 22): Ray's local multi-node utilities start a head
(1 "T4" slot) and a second node (1 "V100" slot); `gpuwise run`'s runtime trains one job on each, the
second node is removed mid-chunk, and the job that ran there is rebuilt on the head from its last
checkpoint once the other job, which trains on untouched, leaves the T4 (two slots: each slot actor
imports torch, the test's main cost).
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("ray")
pytest.importorskip("torch")

from gpuwise.hardware.cluster import make_cluster  # noqa: E402
from gpuwise.runtime.driver import RunOptions  # noqa: E402
from gpuwise.runtime.report import execute  # noqa: E402
from gpuwise.runtime.workload import jobs_from_rows  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray"), pytest.mark.timeout(180)]

# node 0: the V100 on the second Ray node (first in cluster order: FIFO places the first job there);
# node 1: the T4 on the head
CLUSTER = make_cluster([("V100", 1, 1), ("T4", 1, 1)], name="test-two-nodes")
K = 5  # steps per chunk = checkpoint interval
MB = 1024 * 1024


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    import ray
    from ray.cluster_utils import Cluster

    from gpuwise.runtime.pool import WorkerPool

    if ray.is_initialized():  # one driver, one cluster: another test of this process holds Ray
        pytest.skip("this process is already connected to a Ray cluster; run this file on its own")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"T4": 1},
                                                            "object_store_memory": 80 * MB, "include_dashboard": False})
    pool = None
    try:
        second = cluster.add_node(num_cpus=1, resources={"V100": 1}, object_store_memory=80 * MB)
        pool = WorkerPool(CLUSTER, tmp_path_factory.mktemp("ray"), address=cluster.address, timeout_s=120.0)
        pool.start()
        yield cluster, second, pool
    finally:
        if pool is not None:
            pool.shutdown()
        ray.shutdown()
        cluster.shutdown()


def test_a_lost_node_rebuilds_its_job_on_what_remains_and_harms_no_other(two_nodes, tmp_path):
    cluster, second, pool = two_nodes
    assert pool.ray_nodes[0] == second.node_id and pool.ray_nodes[1] != second.node_id
    cols = ("name", "time", "num_gpus", "application", "steps", "batch_size")
    wl = jobs_from_rows([dict(zip(cols, map(str, r))) for r in
                         (("a", 0, 1, "tiny-llama", 40, 8), ("b", 0, 1, "tiny-resnet", 200, 8))], "test")
    seen = {"removed_at_step": None, "after": set()}

    def tick(now, jobs):
        a = jobs["a"]
        if seen["removed_at_step"] is None and a.phase == "chunk" and a.step >= K and jobs["b"].phase == "chunk":
            seen["removed_at_step"] = a.step   # mid-chunk, after a recorded checkpoint
            cluster.remove_node(second)
        elif pool.lost:   # once the runtime saw the loss: every allocation reserved or running
            seen["after"] |= {i for jr in jobs.values() for al in (jr.want, jr.alloc) if al for i, _ in al.placement}

    opts = RunOptions(tmp_path / "state", chunk_steps=K, max_wall_s=120.0, round_s=1.0, on_tick=tick)
    out = execute(CLUSTER, wl, "fifo", opts, pool=pool)
    jobs = {j["name"]: j for j in out["jobs"]}
    assert seen["removed_at_step"] is not None and out["jobs_completed"] == 2, jobs
    assert [n["node"] for n in out["lost_nodes"]] == [0] and out["lost_nodes"][0]["gpu_type"] == "V100"
    a, b = jobs["a"], jobs["b"]
    runs = [e for e in a["events"] if e["kind"] in ("start", "rescale")]
    assert runs[0]["gpu_type"] == "V100" and runs[-1]["gpu_type"] == "T4", a["events"]
    assert any(e["kind"] == "node-lost" and e["node"] == 0 for e in a["events"])
    assert runs[-1]["step"] >= seen["removed_at_step"] and runs[-1]["step"] % K == 0   # from its checkpoint
    assert a["lost_steps"] <= K and a["steps"] == 40 and a["last_loss"] < a["first_loss"]
    # the job on the surviving node: one start, no fault, no rebuild
    assert [e["kind"] for e in b["events"] if e["kind"] not in ("submit", "done")] == ["start"], b["events"]
    assert b["restarts"] == 0 and b["steps"] == 200
    lost_at = out["lost_nodes"][0]["t"]
    assert [e["t"] for e in b["events"] if e["kind"] == "done"][0] > lost_at   # it trained through the loss
    assert seen["after"] and 0 not in seen["after"], seen   # nothing reserved or run on the lost node afterwards
    assert any("was lost" in s for s in out["assumptions"])
    assert all(j["simulated_jct_s"] is not None for j in out["jobs"])   # the replay lost the node too
    print({j: [(e["t"], e["kind"], e.get("gpu_type"), e.get("step"), e.get("reason")) for e in jobs[j]["events"]]
           for j in jobs}, out["lost_nodes"])
