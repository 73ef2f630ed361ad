"""Admitting a submitted job: validate, predict (Frenzy), check the user's quota, record it queued.

Predictions are cached per (spec, cluster): a team submitting the same spec a hundred times pays
for one prediction, and concurrent twins wait for the first instead of computing it again.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable

from gpuwise import errors
from gpuwise.errors import InputError
from gpuwise.hardware.cluster import ClusterSpec
from gpuwise.jobqueue.store import Store, User
from gpuwise.plan.submit import Prediction, predict_on_cluster
from gpuwise.workload.jobspec import JobSpec

CACHE_SIZE = 1024
_cache: dict[tuple[str, str, str], Prediction] = {}
_locks: dict[tuple[str, str, str], threading.Lock] = {}
_guard = threading.Lock()


class QuotaError(Exception):
    """The job cannot run within the user's GPU quota (HTTP 403 at the edge)."""


class Infeasible(Exception):
    """Valid input, but the job fits on no GPU type of the cluster (binding constraint named)."""


@dataclass(frozen=True)
class Admitted:
    job: dict                 # the recorded row
    created: bool             # False: an earlier submission with the same idempotency key
    prediction: Prediction


def spec_key(spec: JobSpec) -> str:
    data = spec.model_dump(exclude={"source_path"}, mode="json")
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def predict_cached(spec: JobSpec, cluster: ClusterSpec, objective: str = "time") -> Prediction:
    key = (spec_key(spec), cluster.name + cluster.describe(), objective)
    with _guard:
        if key in _cache:
            return _cache[key]
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        if key not in _cache:
            pred = predict_on_cluster(spec, cluster, objective)
            with _guard:
                if len(_cache) >= CACHE_SIZE:      # bounded: forget the oldest half
                    for k in list(_cache)[:CACHE_SIZE // 2]:
                        _cache.pop(k, None)
                        _locks.pop(k, None)
                _cache[key] = pred
        return _cache[key]


@dataclass(frozen=True)
class Prepared:
    """A job checked and predicted, not yet recorded: the CPU-bound half of `admit`."""
    user: User
    fields: dict
    idempotency_key: str | None
    prediction: Prediction

    def record(self, store: Store, clock: Callable[[], float] | None) -> Admitted:
        """Record it queued (concurrent records share one commit: `Store.insert_job`)."""
        row, created = store.insert_job(self.user, self.fields, self.idempotency_key, clock)
        return Admitted(row, created, self.prediction)


def admit(store: Store, cluster: ClusterSpec, user: User, spec: JobSpec, *, clock: Callable[[], float] | None,
          idempotency_key: str | None = None, objective: str = "time",
          check: Callable[[JobSpec, ClusterSpec], JobSpec] | None = None) -> Admitted:
    """Record ``spec`` for ``user`` as a queued job; raises Infeasible or QuotaError instead.
    ``clock``: the backend's clock, read when the job is recorded (its arrival time); ``check``: the
    backend's `Backend.check` (the spec as it runs it, or InputError when it cannot)."""
    return prepare(cluster, user, spec, idempotency_key=idempotency_key, objective=objective,
                   check=check).record(store, clock)


def prepare(cluster: ClusterSpec, user: User, spec: JobSpec, *, idempotency_key: str | None = None,
            objective: str = "time", check: Callable[[JobSpec, ClusterSpec], JobSpec] | None = None,
            lost: str = "") -> Prepared:
    """Validate, predict and check the quota of ``spec`` (see `admit`), recording nothing. ``cluster``:
    the nodes still alive; ``lost``: what died (`Scheduler.surviving`), named in a refusal."""
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 128):
        raise InputError("Idempotency-Key", idempotency_key, "give 1 to 128 characters")
    try:
        if check is not None:
            spec = check(spec, cluster)
        pred = predict_cached(spec, cluster, objective)
    except InputError as exc:   # bad input, or a job the surviving nodes cannot run (lost ones named)
        if not lost:
            raise
        kind = errors.Infeasible if isinstance(exc, errors.Infeasible) else InputError
        raise kind(exc.field, exc.value, f"{exc.fix} ({lost})") from None
    if pred.chosen is None:
        reasons = "; ".join(f"{o.gpu}: {o.reason}" for o in pred.options)
        raise Infeasible(f"{spec.name} fits on no GPU type of cluster {cluster.name} ({reasons}); "
                         "nearest feasible: a smaller model, more memory-saving options (recompute, ZeRO, "
                         "a smaller micro_batch) or a cluster with larger GPUs" + (f" ({lost})" if lost else ""))
    fewest = min(o.min_gpus for o in pred.feasible)
    if user.quota_gpus is not None and fewest > user.quota_gpus:
        raise QuotaError(f"{spec.name} needs at least {fewest} GPUs; user {user.name}'s quota is "
                         f"{user.quota_gpus} GPUs at once")
    limit = min(x for x in (spec.constraints.max_gpus, user.quota_gpus, cluster.total_gpus) if x is not None)
    allowed = [o.gpu for o in pred.feasible]
    fields: dict[str, Any] = dict(
        name=spec.name, spec=spec.model_dump(exclude={"source_path"}, mode="json"), spec_key=spec_key(spec),
        prediction=pred.to_json(), max_gpus=limit, request_gpus=min(pred.chosen.gpus, limit),
        gpu_type=allowed[0] if len(allowed) == 1 else None)
    return Prepared(user, fields, idempotency_key, pred)
