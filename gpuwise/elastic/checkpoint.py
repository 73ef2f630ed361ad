"""Checkpoints that any width can load, written atomically.

Data parallel (DDP): every replica holds the whole model, so rank 0 saves the full state dicts in one
file -- a temporary name renamed into place, so a checkpoint exists whole or not at all. Sharded
(FSDP2): `torch.distributed.checkpoint` writes every rank's shards into a temporary folder that rank 0
renames once all have written; it reshards on load, so a checkpoint of W ranks loads on any W'.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import torch
import torch.distributed as dist

NAME = re.compile(r"^step-(\d{7})(\.pt)?$")


def path_for(folder: Path, step: int, sharded: bool) -> Path:
    return Path(folder) / (f"step-{step:07d}" + ("" if sharded else ".pt"))


def latest(folder: Path) -> Path | None:
    """The newest complete checkpoint in ``folder`` (temporary files are not checkpoints)."""
    if not Path(folder).is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in Path(folder).iterdir() if (m := NAME.match(p.name)))
    return found[-1][1] if found else None


def prune(folder: Path, keep: int = 2) -> None:
    found = sorted((int(m.group(1)), p) for p in Path(folder).iterdir() if (m := NAME.match(p.name)))
    for _, p in found[:-keep]:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def save(path: Path, model, optimizer, meta: dict, sharded: bool, rank: int) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if sharded:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        msd, osd = get_state_dict(model, optimizer)
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        _barrier()
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(tmp))
        if rank == 0:
            torch.save(meta, tmp / "meta.pt")
    elif rank == 0:
        torch.save({"model": _plain(model).state_dict(), "optim": optimizer.state_dict(), "meta": meta}, tmp)
    _barrier()
    if rank == 0:
        os.replace(tmp, path)
    _barrier()


def load(path: Path, model, optimizer, sharded: bool) -> dict:
    """Load ``path`` into ``model`` and ``optimizer``; returns the checkpoint's meta dict."""
    path = Path(path)
    if sharded:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        msd, osd = get_state_dict(model, optimizer)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        return torch.load(path / "meta.pt", weights_only=True)
    state = torch.load(path, weights_only=True, map_location="cpu")
    _plain(model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optim"])
    return state["meta"]


def _plain(model):
    return getattr(model, "module", model)  # DDP wraps the user's module


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
