"""FSDP2 (`fully_shard`) on a fake process group: one rank of a dp*cp-way sharded model, traced on CPU."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def fake_mesh(ways: int):
    """A 1-D device mesh of `ways` ranks on the fake backend (collectives allocate, move nothing).
    Create it outside FakeTensorMode (mesh set-up reads real tensors)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized() and dist.get_world_size() != ways:
        dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=ways, store=FakeStore())
    return init_device_mesh("cpu", (ways,))


def shard(model: nn.Module, mesh, param_dtype: torch.dtype | None, reshard_after_forward: bool) -> None:
    """fully_shard every block, then the root (torchtitan's layout). Mixed precision: unsharded
    params in `param_dtype`, gradients reduced in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None)
    for mod in list(model.modules()):
        blocks = getattr(mod, "blocks", None)
        if isinstance(blocks, nn.ModuleList):
            for blk in blocks:
                fully_shard(blk, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
