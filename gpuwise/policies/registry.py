"""Policy names -> constructors (the names `gpuwise simulate --policy` accepts)."""

from __future__ import annotations

from typing import Callable

from gpuwise.errors import unknown_name
from gpuwise.policies.base import Policy


def _fifo(**kw) -> Policy:
    from gpuwise.policies.fifo import Fifo
    return Fifo(backfill=False)


def _first_fit(**kw) -> Policy:
    from gpuwise.policies.fifo import Fifo
    return Fifo(backfill=True)


def _las(**kw) -> Policy:
    from gpuwise.policies.las import Las
    return Las()


def _elastic(**kw) -> Policy:
    from gpuwise.policies.elastic_dp import ElasticDP
    return ElasticDP(elastic=True, **kw)


def _elastic_fixed(**kw) -> Policy:
    from gpuwise.policies.elastic_dp import ElasticDP
    return ElasticDP(elastic=False, **kw)


def _frenzy(**kw) -> Policy:
    from gpuwise.policies.frenzy import Frenzy
    return Frenzy()


def _milp(**kw) -> Policy:
    from gpuwise.policies.milp import Milp
    return Milp()


def _pollux(**kw) -> Policy:
    from gpuwise.policies.pollux import Pollux
    return Pollux()


def _optimus(**kw) -> Policy:
    from gpuwise.policies.optimus import Optimus
    return Optimus()


def _sia(**kw) -> Policy:
    from gpuwise.policies.sia import Sia
    return Sia()


POLICIES: dict[str, Callable[..., Policy]] = {
    "fifo": _fifo, "las": _las, "elastic-dp": _elastic, "elastic-dp-fixed-batch": _elastic_fixed,
    "frenzy": _frenzy, "first-fit": _first_fit, "milp": _milp,
    "pollux": _pollux, "optimus": _optimus, "sia": _sia,
}
# options each policy accepts from the command line
TAKES_ADMISSION = ("elastic-dp", "elastic-dp-fixed-batch")
TAKES_OBJECTIVE = TAKES_ADMISSION


def make_policy(name: str, admission: str | None = None, objective: str | None = None) -> Policy:
    """A fresh policy by name (unknown -> InputError naming the valid ones). ``admission`` and
    ``objective`` (None = the policy's default) apply to the elastic-DP policies only."""
    if name not in POLICIES:
        raise unknown_name("--policy", name, POLICIES)
    kw = {}
    if name in TAKES_ADMISSION and admission:
        kw["admission"] = admission
    if name in TAKES_OBJECTIVE and objective:
        kw["objective"] = objective
    return POLICIES[name](**kw)
