"""A lost node (its machine died; `ClusterState.remove_node`): every policy plans on what remains.

The runtime drops a dead Ray node's GPUs from the book (`ControlLoop.lose_node`); a policy that sized
its plan from the cluster spec would keep handing out the lost GPUs. Here the first of two 4-GPU
nodes is lost and more work waits than the survivor holds: every policy places on the survivor only
and decides as it does on a cluster that only ever had that one node.
"""

import pytest

from gpuwise.hardware.cluster import make_cluster
from gpuwise.policies.base import ClusterState, JobState, SchedView, check_decision
from gpuwise.policies.registry import POLICIES, make_policy
from gpuwise.sim.ground_truth import GroundTruthPerf
from gpuwise.workload.traces import TraceJob


def _decide(name, state, perf):
    pending = {}
    for i, app in enumerate(("cifar10", "bert", "ncf")):
        j = TraceJob(f"j{i}", 0.0, 2, application=app, batch_size=256 if app in ("cifar10", "ncf") else None)
        pending[j.name] = JobState(job=j, submitted_s=0.0, target=perf.target(j))
    view = SchedView(pending, {}, state, list(pending))
    decision = make_policy(name).schedule(0.0, view, perf)
    check_decision(view, decision)
    return {n: a for n, a in decision.allocations.items() if a is not None}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_plans_on_what_remains_after_a_node_is_lost(name):
    cluster = make_cluster([("T4", 2, 4)], name="two-nodes")
    perf = GroundTruthPerf(cluster)
    state = ClusterState(cluster)
    state.remove_node(0)
    assert state.capacity_by_type() == {"T4": 4} and state.free == [0, 4]
    after = _decide(name, state, perf)
    placed = [p for a in after.values() for p in a.placement]
    assert placed and all(node == 1 for node, _ in placed), after
    one = _decide(name, ClusterState(make_cluster([("T4", 1, 4)], name="one-node")), perf)
    assert {n: (a.num_gpus, a.batch_size) for n, a in after.items()} == \
        {n: (a.num_gpus, a.batch_size) for n, a in one.items()}


def test_the_simulator_replays_a_lost_node():
    """A replayed run's node loss (`gpuwise.runtime.replay`): the job on the lost node loses its GPUs,
    restarts on the other type once it is free, and nothing runs on the lost node again."""
    from gpuwise.sim.cluster import simulate
    from gpuwise.workload.traces import Workload

    cluster = make_cluster([("V100", 1, 4), ("T4", 1, 4)], name="v100-t4")
    jobs = [TraceJob(n, 0.0, 4, application="cifar10", batch_size=256, duration_s=3600.0) for n in ("a", "b")]
    wl = Workload(tuple(jobs), "test", "gpuwise")
    base = simulate(cluster, wl, make_policy("fifo"))
    first = {n: u.allocations[0][1] for n, u in base.usage.jobs.items()}
    assert first == {"a": "V100", "b": "T4"}
    lost = simulate(cluster, wl, make_policy("fifo"), node_losses=[(600.0, 0)])
    a = lost.usage.jobs["a"].allocations
    assert [x[1] for x in a] == ["V100", "T4"] and a[1][0] >= 600.0   # rebuilt on the T4 once b left it
    done = {js.name: js.finish_s for js in lost.jobs}
    assert done["a"] > done["b"] and lost.jobs[0].status == "done"
