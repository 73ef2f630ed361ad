"""One policy interface, one event core: the rental policies of issue 5 in the cluster simulator on
an unbounded pay-per-use cluster (issue 5 item 4, DEVELOPERS.md "ONE policy interface").

Reference: the specialised cloud simulator `gpuwise.sim.cloud` (itself checked against the paper's
two-type example, papers.md A.4: b = 2 -> k = (6, 9), E[T] = 1/3, 2 GPUs on average). On the same
seeded stream the two simulators see identical jobs and widths, so mean response time, rented GPUs
and the occupancy quantiles must agree to floating-point error (rel 1e-9: the cluster path works in
seconds, the cloud path in hours).
"""

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.errors import InputError
from gpuwise.hardware.cluster import cluster_from_dict, load_cluster, unbounded_cluster
from gpuwise.plan.rent.baselines import equal_width, greedy, one_gpu
from gpuwise.plan.rent.jobtypes import JobType, SizeDistribution
from gpuwise.plan.rent.solver import Budget, solve
from gpuwise.plan.rent.speedup import AmdahlSpeedup, PowerSpeedup
from gpuwise.policies.base import Allocation, ClusterState
from gpuwise.policies.fixed_width import FixedWidthPolicy
from gpuwise.policies.placement import best_fit, first_fit
from gpuwise.policies.registry import make_policy
from gpuwise.sim.cloud import CloudConfig, poisson_workload, simulate
from gpuwise.sim.cloud_cluster import rental_jobs, simulate_on_cluster
from gpuwise.sim.cluster import ClusterSimulator
from gpuwise.sim.metrics import summarise

FIELDS = ("mean_response_time", "per_type_response_time", "mean_gpus_rented", "mean_gpus_billed",
          "p95_gpus", "p99_gpus", "p_zero", "horizon", "jobs")


def fig1(dist=SizeDistribution("exponential")):
    return [JobType("a", 0.4, dist, AmdahlSpeedup(0.8)), JobType("b", 0.4, dist, PowerSpeedup(0.5))]


def both(types, policy, n, seed, config=CloudConfig()):
    """The same seeded stream through both simulators (each gets the generator in the same state)."""
    rng = np.random.default_rng(seed)
    wl = poisson_workload(types, n, rng)
    return (simulate(types, policy, wl, config, copy.deepcopy(rng)),
            simulate_on_cluster(types, policy, wl, config, copy.deepcopy(rng)))


def assert_same(a, b):
    for f in FIELDS:
        assert np.asarray(getattr(b, f), float) == pytest.approx(np.asarray(getattr(a, f), float), rel=1e-9), f


@pytest.mark.parametrize("budget", [2.0, 2.5])
def test_pi_star_on_unbounded_cluster_equals_cloud_simulator(budget):
    # b = 2: the paper's reference widths (6, 9); b = 2.5 (integer mode): type b mixes widths 14 and
    # 15, so the randomised widths must also be drawn identically. 20,000 jobs, rel 1e-9.
    types = fig1()
    sol = solve(types, Budget(budget), integer=True)
    if budget == 2.0:
        assert sol.widths() == pytest.approx([6.0, 9.0])
    else:
        assert any(len(t.widths) == 2 for t in sol.types)
    cloud, cluster = both(types, FixedWidthPolicy.from_solution(sol), 20_000, seed=7)
    assert_same(cloud, cluster)
    # and both near the analytic optimum (20k jobs: within 5%, cf. test_rent_sim for 10^6 at 1%)
    assert cluster.mean_response_time[0] == pytest.approx(sol.mean_response_time, rel=0.05)
    assert cluster.mean_gpus_rented[0] == pytest.approx(sol.budget_used, rel=0.05)


def test_boot_delay_is_the_cluster_restart_delay():
    # A VM boot delay (held, billed, no progress) is the cluster simulator's restart delay.
    types = fig1(SizeDistribution("lognormal", shape=1.0))
    sol = solve(types, Budget(2.0), integer=True)
    cloud, cluster = both(types, FixedWidthPolicy.from_solution(sol), 5_000, seed=3, config=CloudConfig(boot_delay=0.05))
    assert_same(cloud, cluster)
    assert cluster.mean_response_time[0] > 0.05


@pytest.mark.parametrize("make", [one_gpu, lambda t: greedy(t, Budget(2.0))], ids=["one-gpu", "greedy"])
def test_whole_gpu_baselines_agree(make):
    types = fig1(SizeDistribution("deterministic"))
    cloud, cluster = both(types, make(types), 3_000, seed=1)
    assert_same(cloud, cluster)


def test_fractional_widths_are_refused_on_a_cluster():
    types = fig1()
    with pytest.raises(InputError, match="whole GPUs"):
        both(types, equal_width(types, Budget(2.0)), 50, seed=1)


def test_capacity_planners_refuse_an_unbounded_cluster():
    types = fig1()
    wl = rental_jobs(types, poisson_workload(types, 10, np.random.default_rng(0)))
    cl = unbounded_cluster([("A100-40GB-SXM", 8)])
    with pytest.raises(InputError, match="unbounded"):
        ClusterSimulator(cl, wl, make_policy("elastic-dp"))


def test_fifo_on_unbounded_cluster_never_queues():
    # Pay-per-use: every job starts on arrival, JCT = its run time at its request; cost = GPU-seconds.
    types = fig1(SizeDistribution("deterministic"))
    wl = rental_jobs(types, poisson_workload(types, 200, np.random.default_rng(2)))
    res = ClusterSimulator(unbounded_cluster([("A100-40GB-SXM", 4)]), wl, make_policy("fifo"), restart_s=0).run()
    m = summarise(res)
    assert m["jobs_completed"] == 200 and m["mean_queue_len"] == 0.0
    assert m["mean_jct_s"] == pytest.approx(3600.0, rel=1e-9)  # size 1 h on its 1 requested GPU
    assert m["gpu_hours"] == pytest.approx(200.0, rel=1e-9)
    assert m["utilisation"] is None and m["cluster_gpus"] is None


def test_unbounded_cluster_yaml():
    cl = load_cluster("examples/clusters/cloud-a100-unbounded.yaml")
    assert cl.unbounded and "on demand" in cl.describe()
    with pytest.raises(InputError, match="count"):
        cluster_from_dict({"unbounded": True, "nodes": [{"gpu": "A100", "count": 2, "gpus_per_node": 8}]})
    with pytest.raises(InputError, match="true"):
        cluster_from_dict({"unbounded": "yes", "nodes": [{"gpu": "A100", "gpus_per_node": 8}]})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.booleans()), min_size=1, max_size=40), st.integers(1, 8),
       st.sampled_from([best_fit, first_fit]))
def test_on_demand_pool_accounting(ops, gpn, place):
    # Property: on an unbounded cluster every request is placed, a request that fits one machine is
    # never split, used() equals the live allocations, and the pool never exceeds the live demand
    # plus one partly used machine per allocation (idle machines are reused before renting more).
    state = ClusterState(unbounded_cluster([("A100-40GB-SXM", gpn)]))
    live: list[Allocation] = []
    for n, release in ops:
        if release and live:
            state.release(live.pop(0))
        pl = place(state, "A100-40GB-SXM", n)
        assert pl is not None and sum(g for _, g in pl) == n
        if n <= gpn:
            assert len(pl) == 1
        a = Allocation("A100-40GB-SXM", pl)
        state.allocate(a)
        live.append(a)
        assert state.used() == sum(x.num_gpus for x in live)
        assert all(0 <= f <= c for f, c in zip(state.free, state.cap))


def test_rent_cli_cluster_simulator_gives_the_cloud_numbers(capsys):
    # `gpuwise rent --simulate --simulator cluster`: pi* through the policy interface, same JSON numbers.
    import json

    from gpuwise.cli.main import main

    out = {}
    for sim in ("cloud", "cluster"):
        assert main(["rent", "examples/rent/fig1.yaml", "--budget", "2", "--integer", "--simulate", "--jobs",
                     "3000", "--seed", "4", "--no-baselines", "--json", "--simulator", sim]) == 0
        out[sim] = json.loads(capsys.readouterr().out)["simulated"]
    assert out["cluster"]["simulator"] == "cluster"
    for key in ("mean_response_time", "mean_gpus_rented"):
        assert out["cluster"][key] == pytest.approx(out["cloud"][key], rel=1e-9)
    assert main(["rent", "examples/rent/fig1.yaml", "--budget", "2.3", "--simulate", "--jobs", "100",
                 "--simulator", "cluster"]) == 2  # fractional widths: asks for --integer
    assert "--integer" in capsys.readouterr().err
