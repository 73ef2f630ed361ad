"""`gpuwise.elastic`: elastic data-parallel training for your own PyTorch loop.

    from gpuwise import elastic

    elastic.init()
    model = elastic.model(build_model())                       # DDP, or FSDP2 when the layout shards
    opt = elastic.optimizer(torch.optim.AdamW(model.parameters(), lr=3e-4), scaling="sqrt")
    loader = elastic.DataLoader(dataset, batch_size=16)         # 16 = the global batch the LR is tuned at
    for step in elastic.steps(total=300, chunk=10):             # boundaries every 10 steps
        loss = model(**loader.batch()).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        elastic.report(loss=loss)

Every ``chunk`` steps is a boundary: the measurements of the chunk (step time, sync time, gradient
noise scale, loss) are reduced, a checkpoint any width can load is written atomically, and -- under
`gpuwise run` or the Ray service -- the controller is told and answers go, stop (rescale or
preemption: the script exits, to be restarted at the new width from that checkpoint) or done. The
batch at each step comes from the sample stream's position, so a resumed job trains exactly what it
would have trained next at any width or batch. Under plain ``torchrun`` (or ``python``) the same script
is DDP with checkpoints in ``--job-dir`` (default ./gpuwise-job) and resumes from the newest one.
"""

from __future__ import annotations

from gpuwise.elastic.control import STOP_EXIT

__all__ = ["init", "model", "optimizer", "DataLoader", "steps", "report", "session", "STOP_EXIT"]

_session = None


def init(job_dir=None, seed: int = 0):
    """Join the process group the launcher set up (gloo on CPU, NCCL with CUDA) and start a session.
    ``job_dir``: checkpoints when run standalone (the runtime's job folder wins); ``seed``: data order."""
    global _session
    from gpuwise.elastic.loop import Session

    _session = Session(job_dir, seed)
    return _session


def session():
    if _session is None:
        raise RuntimeError("call gpuwise.elastic.init() first")
    return _session


def model(module, shard: bool | None = None):
    """``module`` on this rank's device, wrapped for data parallelism (see `gpuwise.elastic.wrap`)."""
    from gpuwise.elastic.wrap import wrap_model

    return wrap_model(session(), module, shard)


def optimizer(opt, scaling: str = "sqrt"):
    """``opt`` with its learning rates following the global batch: ``scaling`` is sqrt, linear,
    adascale or none (the job's ``lr_scaling`` overrides it); the LRs given are those at the
    DataLoader's batch_size (the reference batch)."""
    from gpuwise.elastic.wrap import ElasticOptimizer

    s = session()
    s.opt = ElasticOptimizer(opt, scaling)
    return s.opt


def DataLoader(dataset, batch_size: int, collate_fn=None):  # noqa: N802 (reads like torch's)
    from gpuwise.elastic.wrap import ElasticLoader

    s = session()
    s.loader = ElasticLoader(s, dataset, batch_size, collate_fn)
    return s.loader


def steps(total: int | None = None, chunk: int | None = None):
    """Global step numbers from the resumed one; boundaries every ``chunk`` steps (the runtime's
    checkpoint interval wins). Standalone it stops at ``total``; under gpuwise the controller says
    when the job's target is reached."""
    return session().steps(total, chunk)


def report(loss=None) -> None:
    """This step's loss (a float or a 0-d tensor); averaged over ranks at the boundary."""
    if loss is not None:
        session().loss = float(loss.detach() if hasattr(loss, "detach") else loss)
