"""Placement and capacity properties (Frenzy HAS best-fit, papers.md E.4).

Best-fit: exact fit, else least remaining, else greedy across nodes largest-free first -- so a
request that fits on one node is never split. Every policy's decision respects capacity
(property tests over random clusters and job sets; exact).
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.hardware.cluster import make_cluster
from gpuwise.policies.base import Allocation, ClusterState, JobState, SchedView, check_decision
from gpuwise.policies.placement import best_fit, first_fit
from gpuwise.policies.registry import POLICIES, make_policy
from gpuwise.sim.ground_truth import GroundTruthPerf
from gpuwise.workload.traces import TraceJob


def _state(free, gpn=8, gpu="T4"):
    st_ = ClusterState(make_cluster([(gpu, len(free), gpn)]))
    st_.free = list(free)
    return st_


def test_best_fit_exact_then_least_remaining_then_greedy():
    s = _state([5, 3, 8, 4])
    assert best_fit(s, "T4", 3) == ((1, 3),)          # exact fit
    assert best_fit(s, "T4", 2) == ((1, 2),)          # least remaining that holds it (3 free)
    assert best_fit(s, "T4", 7) == ((2, 7),)          # only node 2 holds 7
    assert best_fit(s, "T4", 12) == ((0, 4), (2, 8))  # greedy: largest free first
    assert best_fit(s, "T4", 21) is None


def test_first_fit_takes_first_node_that_holds_it():
    s = _state([5, 3, 8, 4])
    assert first_fit(s, "T4", 3) == ((0, 3),)
    assert first_fit(s, "T4", 10) == ((0, 5), (1, 3), (2, 2))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=12), st.integers(1, 40))
def test_best_fit_never_splits_a_job_that_fits_on_one_node(free, n):
    s = _state(free)
    pl = best_fit(s, "T4", n)
    if max(free) >= n:
        assert pl is not None and len(pl) == 1 and free[pl[0][0]] >= n
    if pl is not None:
        assert sum(g for _, g in pl) == n
        assert all(0 < g <= free[i] for i, g in pl)
        s.allocate(Allocation("T4", pl))  # raises if over capacity
    else:
        assert sum(free) < n


APPS = ["cifar10", "bert", "ncf", "deepspeech2", "yolov3", "imagenet", None]


@st.composite
def scenarios(draw):
    groups = []
    for gpu in draw(st.lists(st.sampled_from(["T4", "V100", "A100"]), min_size=1, max_size=3, unique=True)):
        groups.append((gpu, draw(st.integers(1, 4)), draw(st.sampled_from([1, 2, 4, 8]))))
    cluster = make_cluster(groups)
    biggest = max(cluster.gpus_of_type(t) for t in cluster.gpu_types)
    jobs = []
    for i in range(draw(st.integers(1, 10))):
        app = draw(st.sampled_from(APPS))
        n = draw(st.integers(1, biggest))
        if app is None:
            jobs.append(TraceJob(f"j{i}", float(i), n, duration_s=float(draw(st.integers(60, 3600)))))
        else:
            jobs.append(TraceJob(f"j{i}", float(i), n, application=app,
                                 batch_size=draw(st.sampled_from([64, 128, 256, 512]))))
    running = draw(st.integers(0, len(jobs)))
    return cluster, jobs, running


@settings(max_examples=60, deadline=None)
@given(scenarios(), st.sampled_from(sorted(POLICIES)))
def test_no_policy_ever_exceeds_capacity(scn, name):
    cluster, jobs, n_running = scn
    perf = GroundTruthPerf()
    state = ClusterState(cluster)
    pending, running = {}, {}
    for i, j in enumerate(jobs):
        js = JobState(job=j, submitted_s=j.arrival_s, target=perf.target(j))
        if i < n_running:  # pre-place some jobs first-fit to create fragmentation
            for t in cluster.gpu_types:
                pl = first_fit(state, t, j.num_gpus)
                if pl is not None:
                    js.allocation = Allocation(t, pl, j.batch_size)
                    state.allocate(js.allocation)
                    js.status = "running"
                    running[j.name] = js
                    break
        if js.allocation is None:
            pending[j.name] = js
    view = SchedView(pending, running, state, list(pending))
    policy = make_policy(name)
    decision = policy.schedule(100.0, view, perf)
    check_decision(view, decision)  # raises ValueError on any over-subscribed node
    for name_, alloc in decision.allocations.items():
        if alloc is not None:
            assert alloc.num_gpus >= 1
            assert all(cluster.nodes[i].gpu == alloc.gpu_type for i, _ in alloc.placement)
    assert set(decision.drop) <= set(pending)


@settings(max_examples=40, deadline=None)
@given(scenarios(), st.sampled_from(sorted(POLICIES)))
def test_whole_simulation_stays_within_capacity(scn, name):
    """Every allocation of a full run goes through ClusterState.allocate, which raises on any
    over-subscribed node; the run ends with every job done or dropped and the peak <= capacity."""
    from gpuwise.sim.cluster import simulate
    from gpuwise.sim.metrics import summarise
    from gpuwise.workload.traces import Workload

    cluster, jobs, _ = scn
    jobs = [j if j.rigid else TraceJob(j.name, j.arrival_s, j.num_gpus, application="ncf",
                                       batch_size=j.batch_size) for j in jobs]  # ncf: short jobs
    m = summarise(simulate(cluster, Workload(tuple(jobs), "random", "gpuwise"), make_policy(name)))
    assert m["jobs_completed"] + m["jobs_dropped"] == len(jobs)
    assert m["peak_gpus_used"] <= cluster.total_gpus


def test_frenzy_plans_are_faster_with_more_gpus_and_follow_training():
    """Frenzy's plan list (papers.md E.4: plans ranked by predicted speed, first feasible; rule 1):
    fastest first, every count faster than the smaller ones on its type, and re-rated as training
    progresses: ImageNet's best plan late in training uses a larger batch than at the start (the
    gradient noise grows), which a plan fixed at arrival would never use."""
    from gpuwise.hardware.cluster import pollux_cluster
    from gpuwise.policies.frenzy import Frenzy

    perf = GroundTruthPerf()
    view = SchedView({}, {}, ClusterState(pollux_cluster()))
    job = TraceJob("imagenet-0", 0.0, 32, "imagenet", 6400)
    js = JobState(job=job, submitted_s=0.0, target=perf.target(job))
    fr = Frenzy()
    early = fr.plans(js, view, perf)
    assert [p.goodput for p in early] == sorted((p.goodput for p in early), reverse=True)
    by_count = sorted(early, key=lambda p: p.gpus)
    assert all(a.goodput < b.goodput for a, b in zip(by_count, by_count[1:]))
    js.progress = 0.9 * js.target
    late = fr.plans(js, view, perf)
    assert late[0].batch > early[0].batch


def test_perf_models_accumulate_only_when_asked():
    """goodput_grid: a per-GPU batch over the memory limit is infeasible (0) unless accumulate=True,
    which runs it as micro-steps (slower per sample than the fitting batch, never zero)."""
    perf = GroundTruthPerf()
    job = TraceJob("imagenet-0", 0.0, 32, "imagenet", 6400)
    js = JobState(job=job, submitted_s=0.0, target=perf.target(job))
    plain = perf.goodput_grid(js, "T4", 64, 4, (6400,))[:, 0]
    acc = perf.goodput_grid(js, "T4", 64, 4, (6400,), accumulate=True)[:, 0]
    assert plain[0] == 0.0 and acc[0] > 0.0            # 6400 on one T4 only by accumulating
    assert plain[31] > 0 and acc[31] == plain[31]       # 200 per GPU fits: identical
    assert (acc > 0).all()
