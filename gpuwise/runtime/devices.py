"""Which devices the runtime's slot workers train on: real CUDA GPUs or fake slots on the CPU.

- ``cuda``: each slot of the cluster spec is one real GPU. The local Ray head advertises the
  machine's GPUs (``ray start --num-gpus N``), every placement-group bundle holds ``{"GPU": 1}`` and
  every slot actor asks for ``num_gpus=1``, so Ray gives it its own device (CUDA_VISIBLE_DEVICES:
  ``cuda:0`` inside the actor). Models, optimizer state and batches live there; NCCL all-reduces.
- ``cpu``: the fake slots (one custom resource unit per slot, ``{"T4": 1}``), training on the CPU
  over gloo; the slot actors see no GPU even on a machine that has some.

``auto`` (the default) picks ``cuda`` when there are at least as many CUDA devices as the cluster
spec has slots -- this machine's devices for a local run, the ``GPU`` resources a Ray cluster
advertises with ``--address`` -- and ``cpu`` otherwise. ``cuda`` with too few devices is bad input.
The decision (`choose_devices`) is a pure function; `local_cuda` is the probe.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuwise.errors import InputError

MODES = ("auto", "cuda", "cpu")


@dataclass(frozen=True)
class DeviceChoice:
    mode: str                       # "cuda" | "cpu"
    count: int                      # devices the slots train on (cuda: one per slot; cpu: 0)
    found: int                      # CUDA devices seen (this machine, or the Ray cluster's GPU resources)
    names: tuple[str, ...] = field(default_factory=tuple)  # CUDA device names seen (may be empty: a remote cluster)
    why: str = ""

    def as_dict(self) -> dict:
        return {"mode": self.mode, "count": self.count, "found": self.found, "names": list(self.names),
                "why": self.why}


def describe(d: dict) -> str:
    """One line for the human output, from `DeviceChoice.as_dict` (what --json carries)."""
    if d["mode"] == "cuda":
        names = f" ({', '.join(sorted(set(d['names'])))})" if d["names"] else ""
        return f"devices: cuda, {d['count']} GPUs{names}; {d['why']}"
    return f"devices: cpu (fake GPU slots); {d['why']}"


def choose_devices(override: str, found: int, slots: int, names: tuple[str, ...] = (),
                   flag: str = "--devices", where: str = "on this machine") -> DeviceChoice:
    """``override`` (auto|cuda|cpu) x ``found`` CUDA devices x ``slots`` of the cluster spec -> the mode,
    or InputError (an unknown override; cuda with fewer devices than slots)."""
    if override not in MODES:
        raise InputError(flag, override, "give one of " + ", ".join(MODES))
    names = tuple(names)
    if override == "cpu":
        return DeviceChoice("cpu", 0, found, names, f"{flag} cpu")
    if found >= slots > 0:
        why = f"{flag} cuda" if override == "cuda" else f"{found} CUDA devices {where} for {slots} slots"
        return DeviceChoice("cuda", slots, found, names, why)
    if override == "cuda":
        fix = f"give a cluster spec with at most {found} GPUs" if found else "run where CUDA GPUs are"
        raise InputError(flag, override, f"the cluster spec has {slots} slots but {found} CUDA devices were found "
                         f"{where}; {fix}, or give {flag} cpu (or auto) for fake slots on the CPU")
    return DeviceChoice("cpu", 0, found, names, f"{found} CUDA devices {where}, fewer than the cluster spec's "
                        f"{slots} slots" if found else f"no CUDA device {where}")


def local_cuda() -> tuple[int, tuple[str, ...]]:
    """This process's CUDA devices (after CUDA_VISIBLE_DEVICES): how many, and their names."""
    import torch

    if not torch.cuda.is_available():
        return 0, ()
    n = torch.cuda.device_count()
    return n, tuple(torch.cuda.get_device_name(i) for i in range(n))
