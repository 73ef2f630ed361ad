"""One process's part of an elastic job: the state behind `gpuwise.elastic`'s calls.

Under `gpuwise run` / the Ray service the runtime sets the control folder, the allocation's batch
and the resume checkpoint in the environment (`gpuwise.elastic.control`); under plain ``torchrun``
none is set and the session is DDP with checkpoints in its job folder, resumed from the newest one.
"""

from __future__ import annotations

import math
import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from gpuwise.elastic import checkpoint as ckpt
from gpuwise.elastic import control as ctl
from gpuwise.elastic.metrics import StepStats
from gpuwise.estimate.stat_efficiency import gns_moments

DEFAULT_CHUNK = 50
EMA = 0.7                 # weight of the old value in the noise-scale moving average (as the runtime's)
COMMAND_TIMEOUT_S = 600.0
RULES = ("sqrt", "linear", "adascale", "none")


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else None


class Session:
    def __init__(self, job_dir: str | Path | None = None, seed: int = 0) -> None:
        self.t0 = time.perf_counter()
        env = os.environ
        self.control = Path(env[ctl.ENV_CONTROL]) if env.get(ctl.ENV_CONTROL) else None
        self.job_dir = Path(env.get(ctl.ENV_JOB_DIR) or job_dir or "gpuwise-job")
        self.seed = seed
        self.batch_env, self.ref_env = _env_int(ctl.ENV_BATCH), _env_int(ctl.ENV_REF_BATCH)
        self.chunk_env = _env_int(ctl.ENV_CHUNK)
        self.scaling_env = env.get(ctl.ENV_LR_SCALING) or None
        self.shard = env.get(ctl.ENV_SHARD) == "1"
        self._join()
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.stats = StepStats(world=self.world)
        self.model = self.opt = self.loader = None
        self.sharded = False
        self.step = self.offset = self.boundary = 0
        self.gns: tuple[float, float] | None = None
        self.loss = math.nan
        self.resumed: Path | None = None

    # -- process group ----------------------------------------------------------------------------
    def _join(self) -> None:
        """Join the group torchrun or the runtime described (MASTER_ADDR/PORT, RANK, WORLD_SIZE)."""
        if dist.is_initialized() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if cuda else "gloo", init_method="env://",
                                timeout=timedelta(seconds=float(os.environ.get("GPUWISE_PG_TIMEOUT_S", "300"))))
        if self.control is None:  # standalone: leave the group at exit (the runtime's launcher does it there)
            import atexit

            atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")

    # -- what the job trains at ---------------------------------------------------------------------
    @property
    def ref_batch(self) -> int:
        return self.ref_env or (self.loader.batch_size if self.loader else 1)

    @property
    def global_batch(self) -> int:
        return self.batch_env or self.ref_batch

    @property
    def phi(self) -> float | None:
        if self.gns is None or self.gns[0] <= 0:
            return None
        return max(self.gns[1], 0.0) / self.gns[0]  # tr(Sigma)/|G|^2, in samples

    def lr_factor(self) -> float:
        """LR multiplier at the current batch under the job's rule (the optimizer's base LR is at M0)."""
        from gpuwise.estimate.stat_efficiency import gain

        rule = self.scaling_env or (self.opt.scaling if self.opt else "sqrt")
        if rule not in RULES:
            raise ValueError(f"{ctl.ENV_LR_SCALING}={rule!r}: use one of {', '.join(RULES)}")
        if rule == "adascale":  # AdaScale's gain with the measured noise scale (M/M0 before one is measured)
            phi = self.phi
            return float(gain(self.global_batch, phi if phi is not None else math.inf, self.ref_batch))
        return float(gain(self.global_batch, 0.0, self.ref_batch, rule))

    # -- the loop -----------------------------------------------------------------------------------
    def steps(self, total: int | None, chunk: int | None):
        self.chunk = self.chunk_env or chunk or DEFAULT_CHUNK
        if self.world > self.global_batch:
            raise ValueError(f"global batch {self.global_batch} < {self.world} ranks: every rank needs a sample")
        self._restore()
        if self._boundary("ready") != "go":
            return
        while self.control is not None or total is None or self.step < total:
            t0 = time.perf_counter()
            yield self.step
            self.stats.end_step(time.perf_counter() - t0, self.loss)
            self.loss = math.nan
            self.step += 1
            self.offset += self.global_batch
            last = self.control is None and total is not None and self.step >= total
            if (self.step % self.chunk == 0 or last) and self._boundary("chunk") != "go":
                return

    def _restore(self) -> None:
        if self.control is not None:  # the runtime says which checkpoint counts (its manifest)
            path = Path(os.environ[ctl.ENV_RESUME]) if os.environ.get(ctl.ENV_RESUME) else None
        else:
            path = ckpt.latest(self.job_dir / "checkpoints")
        if path is None or self.model is None or self.opt is None:
            self._apply_lr()
            return
        meta = ckpt.load(path, self.model, self.opt.opt, self.sharded)
        self.step, self.offset = int(meta["step"]), int(meta["offset"])
        self.gns = tuple(meta["gns"]) if meta.get("gns") else None
        self.resumed = path
        self._apply_lr()

    def _apply_lr(self) -> None:
        if self.opt is not None:
            self.opt.set_factor(self.lr_factor())

    def _boundary(self, kind: str) -> str:
        """Measure, checkpoint, report and take the runtime's command (``go``/``stop``/``done``)."""
        if kind == "ready":
            rec = {"kind": "ready", "boundary": 0, "step": self.step, "setup_s": time.perf_counter() - self.t0,
                   "checkpoint": str(self.resumed) if self.resumed else None}
        else:
            self.boundary += 1
            rec = self._chunk_record()
        if self.control is not None:
            ctl.write_report(self.control, self.rank, rec if self.rank == 0 else {"kind": kind, "boundary": rec["boundary"]})
        elif self.rank == 0 and kind == "chunk":
            print(f"step {self.step}: loss {rec['loss'][-1]:.4f}, batch {self.global_batch} on {self.world} rank(s), "
                  f"{sum(rec['step_s']) / len(rec['step_s']):.3f} s/step, checkpoint {rec['checkpoint']}", flush=True)
        cmd = self._command(rec["boundary"])
        if cmd == "stop":
            raise SystemExit(ctl.STOP_EXIT)  # the checkpoint is written: the runtime restarts us elsewhere
        return cmd

    def _command(self, boundary: int) -> str:
        cmd = "go"
        if self.control is not None and self.rank == 0:
            cmd = ctl.wait_command(self.control, boundary, COMMAND_TIMEOUT_S)
        if self.world > 1:
            t = torch.tensor([ctl.COMMANDS.index(cmd)], device=self.device)
            dist.broadcast(t, 0)
            cmd = ctl.COMMANDS[int(t.item())]
        return cmd

    def _chunk_record(self) -> dict:
        rows = torch.tensor(self.stats.rows, dtype=torch.float64).reshape(-1, 5)
        self.stats.rows = []
        if self.world > 1:
            rows = rows.to(self.device)
            dist.all_reduce(rows)
            rows = (rows / self.world).cpu()
        step_s, sync_s, loss, big_sq, small_sq = (rows[:, i].tolist() for i in range(5))
        b, small_b = self.global_batch, self.global_batch / self.world
        m = gns_moments(sum(big_sq) / len(big_sq), sum(small_sq) / len(small_sq), b, small_b) if not self.sharded else None
        if m is not None:
            self.gns = m if self.gns is None else tuple(EMA * o + (1 - EMA) * n for o, n in zip(self.gns, m))
        path = ckpt.path_for(self.job_dir / "checkpoints", self.step, self.sharded)
        if self.model is not None and self.opt is not None:
            ckpt.save(path, self.model, self.opt.opt, {"step": self.step, "offset": self.offset, "gns": self.gns,
                                                      "batch": b, "world": self.world}, self.sharded, self.rank)
            if self.rank == 0 and self.control is None:  # under the runtime the controller prunes
                ckpt.prune(path.parent)
        else:
            path = None
        self._apply_lr()  # AdaScale follows the new noise estimate
        dev = self.device
        peak = None
        if dev.type == "cuda":   # the chunk's caching-allocator peak (the runtime's measured peak memory)
            peak = torch.cuda.max_memory_reserved(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        return {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type, "peak_bytes": peak,
                "kind": "chunk", "boundary": self.boundary, "end_step": self.step, "checkpoint": str(path) if path else None,
                "step_s": step_s, "sync_s": sync_s, "loss": loss, "big_sq": big_sq, "small_sq": small_sq,
                "small_batch": [small_b] * len(loss), "batch": b, "world": self.world, "samples": self.offset,
                "noise_scale": self.phi, "lr_factor": self.opt.factor if self.opt else None}
