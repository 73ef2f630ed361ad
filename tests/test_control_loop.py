"""The shared control loop (issue 12): asynchronous application with reservations.

A real policy (fifo) on a real `ClusterState`; the actuator here is a recorder that applies
nothing by itself, so the test drives confirm / roll back / faults as a real backend would.
"""

from __future__ import annotations

from gpuwise.control import status as st
from gpuwise.control.loop import ControlLoop
from gpuwise.hardware.cluster import make_cluster
from gpuwise.policies.base import Allocation, Decision, JobState
from gpuwise.policies.registry import make_policy
from gpuwise.workload.traces import TraceJob


class Clock:
    def __init__(self):
        self.t, self.wakes = 0.0, []

    def now(self):
        return self.t

    def wake_at(self, at, kind):
        self.wakes.append((at, kind))


class Recorder:
    def __init__(self):
        self.calls = []

    def advance(self, js, now):
        pass

    def stop(self, js, now):
        self.calls.append(("stop", js.name))

    def start(self, js, alloc, now):
        js.status = st.STARTING
        self.calls.append(("start", js.name, alloc.num_gpus))


def _setup():
    cluster = make_cluster([("T4", 1, 4)], name="t")
    clock, act = Clock(), Recorder()
    loop = ControlLoop(cluster, make_policy("fifo"), None, clock, act)
    jobs = [JobState(job=TraceJob(name=n, arrival_s=0.0, num_gpus=g, duration_s=60.0), submitted_s=0.0,
                     target=60.0) for n, g in (("a", 2), ("b", 2), ("c", 4))]
    return loop, clock, act, jobs


def test_fifo_round_reserves_then_confirm_or_roll_back():
    loop, clock, act, (a, b, c) = _setup()
    for js in (a, b, c):
        loop.submit(js, 0.0)
    assert clock.wakes == [(0.0, "round")]  # one round requested for three arrivals
    loop.on_round(0.0)
    assert [x[1] for x in act.calls] == ["a", "b"] and loop.state.used() == 4
    assert a.status == st.STARTING and list(loop.pending) == ["c"]
    loop.confirm(a, 1.0)
    assert a.status == st.RUNNING
    loop.roll_back(b, 2.0, "timeout")  # its reservation comes back, it waits again
    assert b.status == st.PENDING and loop.state.used() == 2 and "b" in loop.pending
    loop.lose(a, 3.0)
    assert a.status == st.PREEMPTED and loop.state.used() == 0 and a.allocation is None


def test_releases_are_booked_before_grows():
    """A decision that moves GPUs from one job to another fits only if releases come first."""
    loop, clock, act, (a, b, _) = _setup()
    loop.submit(a, 0.0)
    loop.submit(b, 0.0)
    loop.apply(0.0, Decision({"a": Allocation("T4", ((0, 3),)), "b": Allocation("T4", ((0, 1),))}))
    loop.apply(1.0, Decision({"b": Allocation("T4", ((0, 3),)), "a": Allocation("T4", ((0, 1),))}))
    assert loop.state.used() == 4 and a.restarts == 2 and b.restarts == 2
    loop.apply(2.0, Decision({"a": None}))
    assert ("stop", "a") in act.calls and a.status == st.PENDING and loop.state.used() == 3


def test_a_failed_job_is_terminal_and_frees_its_gpus():
    loop, clock, act, (a, b, c) = _setup()
    loop.submit(a, 0.0)
    loop.on_round(0.0)
    assert loop.state.used() == 2
    loop.fail(a, 5.0)
    assert a.status == st.FAILED and a.finish_s == 5.0 and loop.state.used() == 0
    assert "a" not in loop.running and "a" not in loop.pending


def test_a_lost_node_leaves_the_book_and_no_policy_places_on_it_again():
    cluster = make_cluster([("T4", 2, 2)], name="t2")   # nodes 0 and 1, 2 GPUs each
    clock, act = Clock(), Recorder()
    loop = ControlLoop(cluster, make_policy("fifo"), None, clock, act)
    a, b = (JobState(job=TraceJob(name=n, arrival_s=0.0, num_gpus=2, duration_s=60.0), submitted_s=0.0,
                     target=60.0) for n in ("a", "b"))
    loop.submit(a, 0.0)
    loop.on_round(0.0)
    lost = a.allocation.placement[0][0]
    loop.lose(a, 1.0)               # the actuator loses the node's jobs first ...
    loop.lose_node(lost, 1.0)       # ... then the node's GPUs leave the book
    assert loop.state.capacity_by_type() == {"T4": 2} and loop.state.free[lost] == 0
    assert loop.lost_nodes == [{"t": 1.0, "node": lost, "name": f"T4-{lost}", "gpu_type": "T4", "gpus": 2}]
    loop.submit(b, 1.0)
    loop.on_round(1.0)              # two jobs of 2 GPUs, 2 GPUs left: one runs, on the survivor
    running = [js for js in (a, b) if js.allocation is not None]
    assert len(running) == 1 and running[0].allocation.placement == ((1 - lost, 2),)
    loop.lose(running[0], 2.0)
    assert loop.state.free == [2 if i != lost else 0 for i in range(2)]   # released onto the survivor only


def test_a_node_lost_while_booked_counts_its_gpus_once():
    loop, clock, act, (a, _, _) = _setup()
    loop.submit(a, 0.0)
    loop.on_round(0.0)
    loop.lose_node(0, 1.0)          # booked GPUs stay booked until their job is released
    assert loop.state.capacity_by_type() == {"T4": 0} and loop.state.free == [-2]
    loop.lose(a, 1.0)
    assert loop.state.free == [0] and loop.state.used() == 0
