"""The model, optimizer and data wrappers of `gpuwise.elastic`."""

from __future__ import annotations

import torch
from torch import nn

from gpuwise.elastic.metrics import allreduce_hook
from gpuwise.elastic.sampler import local_indices


def wrap_model(s, module: nn.Module, shard: bool | None = None) -> nn.Module:
    """One rank: the module itself. Data parallel: DDP whose gradients are averaged by the measuring
    hook (`gpuwise.elastic.metrics`). Sharded (``shard`` or the runtime's layout): FSDP2's
    ``fully_shard`` on every block of each ModuleList, then the root (seed the init: FSDP2 does not
    broadcast rank 0's weights as DDP does)."""
    module = module.to(s.device)
    shard = s.shard if shard is None else shard
    if shard and s.world > 1:
        from torch.distributed.fsdp import fully_shard

        for sub in list(module.modules()):
            if isinstance(sub, nn.ModuleList):
                for block in sub:
                    fully_shard(block)
        fully_shard(module)
        s.model, s.sharded = module, True
        return module
    if s.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [s.device.index] if s.device.type == "cuda" else None
        module = DDP(module, device_ids=ids)
        module.register_comm_hook(s.stats, allreduce_hook)
    s.model = module
    return module


class ElasticOptimizer:
    """A torch optimizer whose LRs are its base LRs (at the reference batch) times the session's
    factor for the current batch; everything else is the optimizer's own."""

    def __init__(self, opt: torch.optim.Optimizer, scaling: str) -> None:
        self.opt, self.scaling = opt, scaling
        self.base_lrs = [g["lr"] for g in opt.param_groups]
        self.factor = 1.0

    def set_factor(self, factor: float) -> None:
        self.factor = factor
        for g, lr in zip(self.opt.param_groups, self.base_lrs):
            g["lr"] = lr * factor

    def __getattr__(self, name):  # step, zero_grad, param_groups, state_dict, ...
        return getattr(self.opt, name)


class ElasticLoader:
    """``batch()``: this rank's share of the current step's global batch (`gpuwise.elastic.sampler`),
    collated (default: torch's default_collate)."""

    def __init__(self, s, dataset, batch_size: int, collate_fn=None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size {batch_size}: give at least 1")
        self.s, self.dataset, self.batch_size = s, dataset, int(batch_size)
        self.collate = collate_fn or torch.utils.data.default_collate

    def indices(self):
        s = self.s
        return local_indices(len(self.dataset), s.seed, s.offset, s.global_batch, s.rank, s.world)

    def batch(self):
        return self.collate([self.dataset[int(i)] for i in self.indices()])
