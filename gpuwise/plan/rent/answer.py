"""What `gpuwise rent` answers, below the CLI: the policy for a budget under a cloud's rules
(boot delay, billing increments, instance sizes), its assumptions, a budget sweep and the
policies a simulation compares. The CLI only parses the flags and renders these."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from gpuwise.plan.rent.jobtypes import JobType
from gpuwise.plan.rent.solver import Budget, RentSolution, solve


@dataclass(frozen=True)
class RentModel:
    """Job types, budget and cloud rules that every re-solve (sweep, window) must share."""

    types: Sequence[JobType]          # as given
    plan_types: Sequence[JobType]     # widths restricted to whole instances when sizes are on sale
    budget: Budget
    integer: bool                     # as asked (--integer)
    boot: float                       # hours
    billing_increment: float          # hours
    minimum_charge: float             # hours
    instance_sizes: tuple[int, ...] | None

    @property
    def plan_integer(self) -> bool:
        """Instance-aware widths mix neighbouring sizes, which replaces --integer."""
        return self.integer and not self.instance_sizes

    @property
    def billing_rules(self) -> bool:
        return self.billing_increment > 0 or self.minimum_charge > 0

    def resolve(self, amount: float) -> RentSolution:
        """The policy for a long-run budget `amount` (same units) under the chosen cloud model."""
        b = replace(self.budget, amount=amount)
        if self.billing_rules:  # billing makes sizes matter: tabulated whole-width solver covering every switch
            from gpuwise.plan.rent.realistic import solve_realistic

            return solve_realistic(self.types, b, self.boot, self.billing_increment, self.minimum_charge,
                                   self.instance_sizes)
        return solve(self.plan_types, b, integer=self.plan_integer, boot_delay=self.boot)


def rent_model(types: Sequence[JobType], budget: Budget, cloud, integer: bool) -> RentModel:
    """`cloud` is any object with boot_delay, billing_increment, minimum_charge (hours) and instance_sizes."""
    plan_types = types
    if cloud.instance_sizes:  # widths on whole instances only; mixing neighbours replaces --integer
        from gpuwise.plan.rent.instances import instance_aware

        plan_types = instance_aware(types, cloud.instance_sizes)
    return RentModel(types, plan_types, budget, integer, cloud.boot_delay, cloud.billing_increment,
                     cloud.minimum_charge, cloud.instance_sizes)


def optimal_policy(model: RentModel) -> RentSolution:
    """pi* at the model's budget, saying when instance sizes restricted the widths."""
    sol = model.resolve(model.budget.amount)
    if model.instance_sizes and not model.billing_rules:
        sol = replace(sol, assumptions=sol.assumptions + (
            "instance-aware: widths restricted to what " + "/".join(map(str, model.instance_sizes))
            + "-GPU instances make up without idle GPUs (sizes, then multiples of the largest); one type may "
              "mix two neighbouring widths",))
    return sol


def policy_assumptions(model: RentModel, sol: RentSolution, occ, spec) -> list[str]:
    """The solution's, the spec's and the occupancy's assumptions, plus the default-price caveat."""
    assumptions = list(sol.assumptions) + list(spec.notes) + list(occ.assumptions)
    if model.budget.unit == "usd_per_hour" and spec.unpriced:
        assumptions.append(f"no price_per_gpu_hour in {spec.source} for {', '.join(spec.unpriced)}: priced at "
                           "$1/GPU-h by default, so the USD budget equals a GPU budget; set the prices in the file")
    return assumptions


def budget_sweep(model: RentModel, sol: RentSolution, sweep_text: str | None):
    """pi* over a budget range (--sweep, or for a plot from just above the stability limit to 2x the
    budget); returns (SweepResult, assumptions it adds)."""
    from gpuwise.plan.rent.sweep import parse_range, sweep

    if sweep_text:
        lo, hi, step = parse_range(sweep_text)
    else:
        lo, hi = sol.min_budget * 1.01, max(2 * model.budget.amount, sol.min_budget * 1.5)
        step = (hi - lo) / 100
    swept = sweep(model.plan_types, lo, hi, step, model.budget.unit, model.plan_integer, model.boot)
    notes = []
    if model.billing_rules:
        notes.append("sweep and plot ignore billing increments (boot and instance sizes included)")
    if swept.skipped:
        notes.append(f"sweep: {len(swept.skipped)} budgets <= the minimum feasible {swept.min_budget:.6g} skipped")
    return swept, notes


def simulation_policies(model: RentModel, sol: RentSolution, baselines: bool):
    """pi*, then (with `baselines`) the paper's pi* where the cloud is realistic and the baselines;
    returns (policies, assumptions they add)."""
    from gpuwise.plan.rent.baselines import all_baselines
    from gpuwise.policies.fixed_width import FixedWidthPolicy

    policies = [FixedWidthPolicy.from_solution(sol)]
    notes = []
    if baselines:
        if model.boot > 0 or model.instance_sizes or model.billing_rules:
            # the paper's widths (no boot, any width) at the same budget: what realism-awareness buys
            policies.append(FixedWidthPolicy.from_solution(solve(model.types, model.budget, model.integer),
                                                           "pi* (paper)"))
        policies += all_baselines(model.types, model.budget, sol)
        if model.instance_sizes or model.billing_increment or model.minimum_charge:
            notes.append("baselines are sized for the paper's cloud (any width, exact billing; boot "
                         "included) and pay instance rounding / billing increments in simulation")
    return policies, notes
