"""The statuses a job goes through, and which of them hold GPUs.

Policies see two groups only (`SchedView.pending` and `SchedView.running`); the finer statuses are
each backend's bookkeeping. The simulator moves jobs instantly, so its jobs only ever read pending,
running, done or dropped; the runtime and the job service also show the transitions a real job
goes through. `Status` is a `StrEnum`: a member equals (and prints as) its value.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    PENDING = "pending"            # waiting for GPUs (new, or stopped by the policy)
    STARTING = "starting"          # GPUs reserved, workers being set up (not yet confirmed)
    RUNNING = "running"
    RESCALING = "rescaling"        # checkpointed, changing width/batch (reservation held)
    CHECKPOINTING = "checkpointing"
    PREEMPTED = "preempted"        # lost its workers to a fault; waits to be rebuilt from its checkpoint
    FAILED = "failed"              # gave up (e.g. too many failed starts); terminal
    DONE = "done"
    DROPPED = "dropped"            # refused by the policy's admission; terminal
    CANCELLED = "cancelled"        # withdrawn by its user (job service); terminal


PENDING, STARTING, RUNNING = Status.PENDING, Status.STARTING, Status.RUNNING
RESCALING, CHECKPOINTING, PREEMPTED = Status.RESCALING, Status.CHECKPOINTING, Status.PREEMPTED
FAILED, DONE, DROPPED, CANCELLED = Status.FAILED, Status.DONE, Status.DROPPED, Status.CANCELLED

ALL = tuple(Status)
HOLDS_GPUS = frozenset((STARTING, RUNNING, RESCALING, CHECKPOINTING))  # in SchedView.running
WAITING = frozenset((PENDING, PREEMPTED))                             # in SchedView.pending
TERMINAL = frozenset((FAILED, DONE, DROPPED, CANCELLED))
UNCONFIRMED = frozenset((STARTING, RESCALING))                        # reserved, not yet confirmed running

# What the job service records and shows its users for each status (its API's `state`; the store's
# `jobs.state` column): a reserved job is "scheduled" until its backend confirms it.
SERVICE_STATE = {PENDING: "queued", PREEMPTED: "queued", STARTING: "scheduled", RESCALING: "scheduled",
                 RUNNING: "running", CHECKPOINTING: "running", DONE: "done", FAILED: "failed",
                 DROPPED: "failed", CANCELLED: "cancelled"}
