"""A node lost under `gpuwise serve --backend ray` shrinks the service's cluster (issue 22).

Ray's local multi-node utilities start a head (1 "T4" slot) and a second node (1 "V100" slot), as in
tests/test_runtime_node_loss.py; the service's scheduler (store, Ray backend, the shared control
loop, driven round by round in this process) and its real app (FastAPI's TestClient) run two
tiny-llama jobs, one per node. The second node is removed mid-chunk: the service's capacity shrinks
(/v1/cluster, /v1/health, the dashboard), the job that was there gets a node-lost event and finishes
on the head from its last checkpoint, the other trains on untouched, nothing is placed on the dead
node again, a job only the dead node could run is refused naming it (one already queued for it is
failed, naming it), and a restart on the same store keeps the node lost (Ray still lacks it).
"""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("ray")
pytest.importorskip("torch")
pytest.importorskip("httpx")

from gpuwise.hardware.cluster import make_cluster  # noqa: E402
from gpuwise.jobqueue.scheduler import open_queue  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray"), pytest.mark.timeout(150)]

V100 = "V100-16GB-SXM2"   # canonical: the name a job spec's constraints.gpus resolves to
CLUSTER = make_cluster([(V100, 1, 1), ("T4", 1, 1)], name="test-two-nodes")   # node 0: the second Ray node
MB = 1024 * 1024
JOB = {"model": "tiny-llama", "training": {"samples": 1200, "global_batch": 8}, "constraints": {"max_gpus": 1}}


@pytest.fixture(scope="module")
def two_nodes():
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # one driver, one cluster: another test of this process holds Ray
        pytest.skip("this process is already connected to a Ray cluster; run this file on its own")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"T4": 1},
                                                            "object_store_memory": 80 * MB, "include_dashboard": False})
    try:
        second = cluster.add_node(num_cpus=1, resources={V100: 1}, object_store_memory=80 * MB)
        yield cluster, second
    finally:
        ray.shutdown()
        cluster.shutdown()


def _close(sch) -> None:
    sch.stop()
    sch.backend.close()
    sch.store.close()


def _placed(sch) -> set[int]:
    """Nodes holding a reservation or a running job in the loop's book now."""
    return {i for js in sch.loop.running.values() if js.allocation for i, _ in js.allocation.placement}


def test_a_node_lost_under_the_service_shrinks_its_cluster_and_moves_only_its_job(two_nodes, tmp_path):
    from fastapi.testclient import TestClient

    from gpuwise.service.app import create_app
    from gpuwise.service.dashboard import render

    ray_cluster, second = two_nodes
    db = f"sqlite:///{tmp_path / 'service.db'}"
    t0 = time.monotonic()
    sch = open_queue(db, CLUSTER, backend="ray", policy="fifo", ray_address=ray_cluster.address)
    k = sch.backend.opts.chunk_steps
    store = sch.store
    user, token = store.create_token("ann")
    auth = {"Authorization": f"Bearer {token}"}
    seen: dict = {"removed_at_step": None, "after": set(), "victim": None}
    try:
        with TestClient(create_app(store, sch, run_scheduler=False)) as client:
            ids = [client.post("/v1/jobs", json={**JOB, "name": n}, headers=auth).json()["id"] for n in "ab"]
            pinned = client.post("/v1/jobs", json={**JOB, "name": "v", "constraints": {"gpus": ["V100"], "max_gpus": 1}},
                                 headers=auth).json()["id"]     # queued behind a and b, for the V100 only
            assert client.get("/v1/health").json()["capacity"] == {"gpus": 2, "spec_gpus": 2, "lost_gpus": 0,
                                                                    "lost_nodes": []}
            deadline = time.monotonic() + 110
            while time.monotonic() < deadline and any(store.job(j)["state"] != "done" for j in ids):
                sch.round()
                runs = sch.backend.act.jobs
                if seen["removed_at_step"] is None and len(runs) == 2 and all(
                        r.phase == "chunk" and r.alloc for r in runs.values()):
                    victim = next(j for j, r in runs.items() if r.alloc.placement[0][0] == 0)
                    if runs[victim].step >= k:   # mid-chunk, after a recorded checkpoint
                        seen["removed_at_step"], seen["victim"] = runs[victim].step, victim
                        ray_cluster.remove_node(second)
                elif sch.loop.lost_nodes:        # once the service saw the loss: every reservation
                    seen["after"] |= _placed(sch)
                    if "cluster" not in seen:
                        seen["cluster"] = client.get("/v1/cluster", headers=auth).json()
                        seen["health"] = client.get("/v1/health").json()
                        seen["v100"] = client.post("/v1/jobs", json={**JOB, "name": "c", "constraints": {
                            "gpus": ["V100"], "max_gpus": 1}}, headers=auth)
                        seen["page"] = render("ann", store.jobs(), [], [], sch.snapshot(), {user.id: "ann"})
                time.sleep(0.1)
            events = {j: client.get(f"/v1/jobs/{j}/events", headers=auth).json()["events"] for j in ids}
        print(f"\ntwo jobs through a node loss in {time.monotonic() - t0:.1f} s; removed at step "
              f"{seen['removed_at_step']}", {j: [(round(e["at_s"], 2), e["kind"]) for e in ev] for j, ev in events.items()},
              sch.loop.lost_nodes)
        assert seen["removed_at_step"] is not None and all(store.job(j)["state"] == "done" for j in ids), seen
        victim = seen["victim"]
        survivor = next(j for j in ids if j != victim)
        # the service's view shrank: /v1/cluster, /v1/health and the dashboard
        cl, health = seen["cluster"], seen["health"]
        assert {g["gpu"]: g["total"] for g in cl["gpu_types"]} == {V100: 0, "T4": 1}
        assert [n["lost"] for n in cl["nodes"]] == [True, False] and cl["nodes"][0]["gpus"] == 0
        cap = health["capacity"]
        assert (cap["gpus"], cap["spec_gpus"], cap["lost_gpus"]) == (1, 2, 1)
        assert [(d["node"], d["name"], d["gpu_type"]) for d in cap["lost_nodes"]] == [(0, f"{V100}-0", V100)]
        assert f"nodes lost: {V100}-0 (1 {V100}" in seen["page"] and "1 of 2 GPUs remain" in seen["page"]
        # a job only the lost node could run is refused, naming the lost capacity (not queued forever)
        assert seen["v100"].status_code == 422, seen["v100"].text
        assert f"{V100}-0" in seen["v100"].text and "1 of 2 GPUs remain" in seen["v100"].text
        row = store.job(pinned)     # one queued for the V100 before the loss: failed, not left waiting forever
        assert row["state"] == "failed" and f"no {V100} GPUs remain" in row["message"] and f"{V100}-0" in row["message"]
        # the victim: a node-lost event, queued, then placed on the survivor, done from its checkpoint
        kinds = [e["kind"] for e in events[victim]]
        assert kinds.count("node-lost") == 1 and kinds[-1] == "done", kinds
        lost_ev = next(e for e in events[victim] if e["kind"] == "node-lost")
        assert lost_ev["detail"]["node"] == 0 and lost_ev["detail"]["was"]["placement"] == [[0, 1]]
        later = [e for e in events[victim][kinds.index("node-lost"):] if e["kind"] == "allocated"]
        assert later and all(e["detail"]["placement"] == [[1, 1]] for e in later), events[victim]
        rt = sch.backend.store.jobs()
        assert rt[victim]["faults"] == 1 and rt[victim]["lost_steps"] <= k, rt[victim]   # one interval at most
        starts = [e for e in sch.backend.store.events(victim) if e["kind"] in ("start", "rescale")]
        assert starts[0]["gpu_type"] == V100 and starts[-1]["gpu_type"] == "T4", starts
        assert starts[-1]["step"] % k == 0 and starts[-1]["step"] > seen["removed_at_step"] - k   # its checkpoint
        # the other job: one allocation, no fault, trained through the loss
        assert [e["kind"] for e in events[survivor]] == ["submitted", "allocated", "running", "done"], events[survivor]
        assert rt[survivor]["faults"] == 0 and rt[survivor]["lost_steps"] == 0
        assert events[survivor][-1]["at_s"] > cap["lost_nodes"][0]["t"]
        assert seen["after"] and 0 not in seen["after"], seen["after"]   # nothing on the lost node afterwards
    finally:
        _close(sch)
    # a restart on the same store: Ray still lacks the node, so it stays lost (no workers sought there)
    sch = open_queue(db, CLUSTER, backend="ray", ray_address=ray_cluster.address)
    try:
        snap = sch.snapshot()
        assert {g["gpu"]: g["total"] for g in snap["gpu_types"]} == {V100: 0, "T4": 1}
        assert snap["capacity"]["lost_nodes"] == cap["lost_nodes"] and len(sch.backend.pool.slots) == 1
        assert sch.surviving()[0].total_gpus == 1
    finally:
        _close(sch)
    print(f"with a restart: {time.monotonic() - t0:.1f} s")
