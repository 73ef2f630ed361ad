"""The statuses a job goes through, and which of them hold GPUs.

Policies see two groups only (`SchedView.pending` and `SchedView.running`); the finer statuses are
each backend's bookkeeping. The simulator moves jobs instantly, so its jobs only ever read pending,
running, done or dropped; the runtime also shows the transitions a real job goes through.
"""

from __future__ import annotations

PENDING = "pending"            # waiting for GPUs (new, or stopped by the policy)
STARTING = "starting"          # GPUs reserved, workers being set up (not yet confirmed)
RUNNING = "running"
RESCALING = "rescaling"        # checkpointed, changing width/batch (reservation held)
CHECKPOINTING = "checkpointing"
PREEMPTED = "preempted"        # lost its workers to a fault; waits to be rebuilt from its checkpoint
FAILED = "failed"              # gave up (e.g. too many failed starts); terminal
DONE = "done"
DROPPED = "dropped"            # refused by the policy's admission; terminal

ALL = (PENDING, STARTING, RUNNING, RESCALING, CHECKPOINTING, PREEMPTED, FAILED, DONE, DROPPED)
HOLDS_GPUS = frozenset((STARTING, RUNNING, RESCALING, CHECKPOINTING))  # in SchedView.running
WAITING = frozenset((PENDING, PREEMPTED))                             # in SchedView.pending
TERMINAL = frozenset((FAILED, DONE, DROPPED))
