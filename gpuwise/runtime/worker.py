"""One GPU slot: a long-lived Ray actor that trains its share of one job at a time.

The actor imports torch once, when the pool starts it (a warm spare), so growing a job pays for a
process-group set-up and a checkpoint load, not for a new process. A job's workers form a
torch.distributed group (gloo on CPU, NCCL where the slot is a real GPU) and run data parallel:
gradients are all-reduced after the backward pass as DDP does, but without DDP's bucketing overlap,
so compute time and sync time are measured apart (the Pollux fit wants both).

Gradient noise scale (McCandlish et al. 2018, the estimator Pollux/AdaptDL log): each rank
splits its local batch into two halves and keeps both half-batch gradients, so every step yields
|g|^2 at a small batch (b/2, averaged over the 2W halves) and at the global batch B (after the
all-reduce), even on one worker. From those, unbiased |G|^2 and tr(Sigma) follow; phi = tr(Sigma)/|G|^2.

Device (`gpuwise.runtime.devices`): a ``cuda`` slot is started by the pool with ``num_gpus=1``, so
Ray's CUDA_VISIBLE_DEVICES leaves it one device, ``cuda:0``; model, optimizer state, batches and
checkpoint loads live there. A ``cpu`` slot hides every GPU from its process (Ray leaves the
variable alone for actors that ask for no GPU), so neither its model nor a script it runs picks CUDA.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class SlotWorker:
    """Plain class; the pool wraps it with ``ray.remote`` (so this module imports without Ray)."""

    def __init__(self, slot: str, device: str = "cpu") -> None:
        if device == "cpu":    # before torch initialises CUDA: fake slots train on the CPU only
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        import torch

        torch.set_num_threads(1)  # slots share the machine's cores; one thread each
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"slot {slot}: started as a CUDA slot but sees no CUDA device "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
        self.device = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.slot, self.job = slot, None
        self._warm()
        self.model = self.opt = self.data = self.script = None

    def _warm(self) -> None:
        """Pay every first-call cost (imports, gloo start-up, kernels, optimizer) while the slot is
        a spare: measured here, a slot's first process group took 20-45 s on a loaded machine,
        later ones 0.2-0.4 s."""
        import torch
        import torch.distributed as dist

        from gpuwise.runtime.small_models import small_models
        from gpuwise.runtime.training import Data, build

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
        for m in small_models().values():
            model = build(m, 0, self.device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            model(*(t.to(self.device) for t in Data(m, 0).local_batch(0, 4, 0, 1))).backward()
            opt.step()
        t = torch.zeros(4)
        dist.all_reduce(t)
        dist.barrier()
        dist.destroy_process_group()

    def ready(self) -> int:
        return os.getpid()

    def device_name(self) -> str:
        """The device this slot trains on: the CUDA device's name, or "cpu"."""
        import torch

        return torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"

    def address(self) -> tuple[str, int]:
        import ray

        return ray.util.get_node_ip_address(), free_port()

    def setup(self, job: dict, rank: int, world: int, master: str, port: int, ckpt: str | None,
              timeout_s: float) -> float:
        """Join a new process group for ``job`` and load its checkpoint (None: fresh weights)."""
        import torch
        import torch.distributed as dist

        from gpuwise.runtime.small_models import small_model
        from gpuwise.runtime.training import Data, build

        t0 = time.perf_counter()
        self.teardown()
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://{master}:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
        self.job, self.rank, self.world = job, rank, world
        m = small_model(job["model"])
        self.model = build(m, job["seed"], self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=job["lr"])
        self.data = Data(m, job["seed"])
        if ckpt:
            state = torch.load(ckpt, map_location=self.device, weights_only=True)
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["opt"])
        dist.barrier()
        return time.perf_counter() - t0

    def teardown(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self.job = self.model = self.opt = self.data = self.script = None

    def launch(self, job: dict, rank: int, world: int, master: str, port: int, timeout_s: float) -> dict:
        """Start rank ``rank`` of a script job here (`gpuwise.runtime.script`): an elastic script's
        ready report (or its exit), or at once for a rigid one."""
        from gpuwise.runtime.script import ScriptRun

        self.teardown()
        self.script = ScriptRun(job, rank, world, master, port)
        self.script.start()
        return self.script.wait(-1, timeout_s) if job["elastic"] else {"kind": "started", "setup_s": 0.0}

    def drain(self, timeout_s: float) -> int:
        """After a fault took a peer: wait for this slot's script to end (the lost peer breaks its
        collectives), so the warm process serves again without re-importing torch; a script that does
        not end in time takes the process with it (Ray restarts the actor)."""
        if self.script is not None:
            self.script.thread.join(timeout_s)
            if self.script.thread.is_alive():
                os._exit(1)
        self.teardown()
        return os.getpid()

    def follow(self, after: float, cmd: str | None, timeout_s: float) -> dict:
        """Answer boundary ``after`` with ``cmd`` (rank 0), then wait for the next report or the exit."""
        from gpuwise.elastic.control import send_command

        if cmd is not None:
            send_command(self.script.control, int(after), cmd)
        return self.script.wait(after, timeout_s)

    def chunk(self, start: int, steps: int, batch: int, lr: float, ckpt: str | None) -> dict:
        """Steps [start, start+steps) at global batch ``batch``; rank 0 then writes ``ckpt``
        (temporary file renamed into place: a checkpoint exists whole or not at all)."""
        import torch

        for g in self.opt.param_groups:
            g["lr"] = lr
        device = next(self.model.parameters()).device
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        rows = [self._step(s, batch) for s in range(start, start + steps)]
        out = {k: [r[k] for r in rows] for k in rows[0]}
        # where the steps ran, and the caching allocator's peak on CUDA (the measured peak memory)
        out["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
        out["peak_bytes"] = torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None
        if ckpt and self.rank == 0:
            tmp = ckpt + ".tmp"
            torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                        "step": start + steps}, tmp)
            os.replace(tmp, ckpt)
        out["end_step"] = start + steps
        return out

    def _step(self, step: int, batch: int) -> dict:
        import torch
        import torch.distributed as dist

        from gpuwise.runtime.training import share

        t0 = time.perf_counter()
        x, y = (t.to(self.device) for t in self.data.local_batch(step, batch, self.rank, self.world))
        params = [p for p in self.model.parameters()]
        half = max(1, len(x) // 2)
        parts, losses = [], []
        for sl in (slice(0, half), slice(half, len(x))):
            if sl.stop - sl.start < 1:
                continue
            self.opt.zero_grad(set_to_none=False)
            loss = self.model(x[sl], y[sl])
            loss.backward()
            parts.append((sl.stop - sl.start, torch.cat([p.grad.reshape(-1) for p in params])))
            losses.append(float(loss.detach()) * (sl.stop - sl.start))
        local = sum(n * g for n, g in parts) / len(x)             # mean gradient of the local batch
        small = sum(float(g.square().sum()) for _, g in parts)    # sum of half-batch |g|^2
        lo, hi = share(batch, self.rank, self.world)
        cuda = self.device.type == "cuda"
        if cuda:             # NCCL returns once the collective is queued: time the transfer itself
            torch.cuda.synchronize(self.device)
        t1 = time.perf_counter()
        buf = torch.cat([local * ((hi - lo) / batch),             # weighted: sums to the global mean
                         torch.tensor([small, len(parts), sum(losses)], device=self.device)])
        dist.all_reduce(buf)
        if cuda:
            torch.cuda.synchronize(self.device)
        t2 = time.perf_counter()
        grad = buf[:-3]
        off = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(grad[off:off + n].view_as(p))
            off += n
        self.opt.step()
        small_sq, halves, loss_sum = (float(v) for v in buf[-3:])
        return {"step_s": time.perf_counter() - t0, "sync_s": t2 - t1, "loss": loss_sum / batch,
                "big_sq": float(grad.square().sum()), "small_sq": small_sq / halves,
                "small_batch": batch / halves}
