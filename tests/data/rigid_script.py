"""A script that does not use gpuwise.elastic (a rigid job): plain torch.distributed from the env,
its own checkpoint in $GPUWISE_JOB_DIR, resumed if there."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
ck = os.path.join(os.environ.get("GPUWISE_JOB_DIR", "."), "own.pt")
model = torch.nn.Linear(4, 1)
start = torch.load(ck)["step"] if os.path.exists(ck) else 0
for step in range(start, 30):
    for p in model.parameters():
        t = torch.ones_like(p)
        dist.all_reduce(t)
    if dist.get_rank() == 0 and step % 10 == 9:
        torch.save({"step": step + 1}, ck)
print("rigid script done at", dist.get_world_size(), "ranks")
