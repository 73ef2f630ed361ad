"""Ray: the cluster connection, one placement group per cluster node, one warm worker per slot.

A local run starts a private Ray instance with one custom resource per GPU type (``{"T4": 4,
"V100": 4}``), so a fake heterogeneous cluster runs on one machine: slot actors reserve
``{type: 1}`` plus a fraction of a CPU. With ``--address`` the user's cluster must advertise the
same resources (``ray start --resources '{"T4": 4}'``). Where the slots are real CUDA GPUs
(`gpuwise.runtime.devices`: this machine's for a local head, the ``GPU`` resources of a cluster
given by ``--address``), the head also advertises them (``--num-gpus``), every bundle and slot
actor takes ``{"GPU": 1}`` as well, and Ray narrows each actor to its own device. Each node of
the ClusterSpec is a STRICT_PACK placement group whose bundles are its slots, so the policy's
placement (node, GPUs on it) maps onto Ray nodes as it does in the simulator.

Known ground of Ray 2.60 here (issue 12): token auth is disabled for local runs, Ray's temp folder is
per run, the object store is capped, workers get PYTHONPATH (they do not inherit sys.path), and every
ray.get has a timeout. A local head is started by `gpuwise.runtime.local_ray` (not ``ray.init()``,
whose fixed start-up waits fail on a loaded machine).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpuwise.errors import InputError
from gpuwise.hardware.cluster import ClusterSpec

OBJECT_STORE_BYTES = 80 * 1024 * 1024
START_TIMEOUT_S = 600.0  # 8 actors importing torch at once took 212 s here at load average 30


class WorkersNotReady(RuntimeError):
    """Ray or its slot workers did not come up in time (valid input, no answer: exit 1)."""


CPU_PER_SLOT = 0.25


def check_address(address: str, flag: str = "--address") -> None:
    """An existing cluster's address, checked before ray.init: a malformed one makes Ray raise a bare
    ValueError, and a GCS address (host:port) that nothing listens on makes it retry for minutes.
    ``auto`` and ``ray://`` client addresses are Ray's to resolve."""
    if address == "auto" or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() or c in "/@" for c in host):
        raise InputError(flag, address, "give the head's GCS address as HOST:PORT (e.g. 127.0.0.1:6379), "
                         "ray://HOST:PORT or auto")
    import socket

    try:
        socket.create_connection((host, int(port)), timeout=5.0).close()
    except OSError as exc:
        raise InputError(flag, address, f"no Ray head answers there ({exc.strerror or exc}); start one (ray start "
                         "--head --resources '{\"T4\": 2}') or leave the flag out for a private local head") from None


@dataclass
class Slot:
    key: str                  # "node/index"
    node: int                 # index in ClusterSpec.nodes
    gpu_type: str
    actor: object
    owner: str | None = None  # job using it
    warming: object = None    # ObjectRef of ready() while the actor (re)starts
    bundle: int = 0           # index in its node's placement group
    lost: bool = False        # its Ray node is gone: never used again


@dataclass
class WorkerPool:
    cluster: ClusterSpec
    tmpdir: Path
    address: str | None = None
    timeout_s: float = START_TIMEOUT_S
    slots: list[Slot] = field(default_factory=list)
    groups: list = field(default_factory=list)
    started_here: bool = False
    start_s: float = 0.0
    head: object = None       # LocalHead when this pool started its own Ray
    address_flag: str = "--address"   # the command's flag that gave `address` (named in errors)
    ray_nodes: list[str] = field(default_factory=list)  # Ray node id hosting each spec node's group
    lost: set[int] = field(default_factory=set)          # spec nodes whose Ray node died (given at start:
                                                         # known lost before, never placed; gpuwise serve)
    devices: str = "auto"                                # auto | cuda | cpu (gpuwise.runtime.devices)
    devices_flag: str = "--devices"
    device: object = None                                # the DeviceChoice made at start

    def start(self) -> None:
        import ray

        from gpuwise.runtime.local_ray import HeadNotReady, LocalHead

        if self.address:   # before anything else: this process may already be connected elsewhere
            check_address(self.address, self.address_flag)
        t0 = time.perf_counter()
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        root = str(Path(__file__).resolve().parents[2])
        env = {"PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p),
               "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled"}
        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, runtime_env={"env_vars": env}, log_to_driver=False)
            else:  # a head of our own (local_ray says why not ray.init()); workers inherit its env
                self.choose_local()
                res = {t: float(self.cluster.gpus_of_type(t)) for t in self.cluster.gpu_types}
                self.head = LocalHead(self.tmpdir.resolve(), max(1, round(self.cluster.total_gpus * CPU_PER_SLOT + 0.5)),
                                      res, OBJECT_STORE_BYTES, env, num_gpus=self.device.count)
                try:
                    address = self.head.start(self.timeout_s)
                    ray.init(address=address, log_to_driver=False)
                except (HeadNotReady, ConnectionError, RuntimeError) as e:
                    self.head.stop()
                    raise WorkersNotReady(f"the local Ray cluster did not start: {e}") from None
                self.started_here = True
        if self.device is None:   # a cluster of the user's (or a Ray this process joined): its GPU resources
            self.device = self._choose_ray()
        self._check_resources()
        try:
            self._place()
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as e:
            why = "not ready" if isinstance(e, ray.exceptions.GetTimeoutError) else f"lost ({type(e).__name__})"
            raise WorkersNotReady(f"the {len(self.slots) or self.cluster.total_gpus} slot workers were {why} "
                                  f"after {time.perf_counter() - t0:.0f} s (limit {self.timeout_s:.0f} s; placement "
                                  "groups or torch import); the machine may be overloaded") from None
        self.start_s = time.perf_counter() - t0

    def choose_local(self) -> None:
        """Decide cuda or cpu slots for a head of our own (InputError: `devices` cannot be had here);
        callers may ask before `start` to refuse bad input before writing any state."""
        from gpuwise.runtime.devices import choose_devices, local_cuda

        if self.device is None:
            found, names = local_cuda()
            self.device = choose_devices(self.devices, found, self.cluster.total_gpus, names, self.devices_flag)

    def _choose_ray(self):
        import ray

        from gpuwise.runtime.devices import choose_devices

        return choose_devices(self.devices, int(ray.cluster_resources().get("GPU", 0)), self.cluster.total_gpus,
                              flag=self.devices_flag, where="in the Ray cluster's GPU resources")

    @property
    def cuda(self) -> bool:
        return self.device is not None and self.device.mode == "cuda"

    def _check_resources(self) -> None:
        import ray

        from gpuwise.hardware.cluster import surviving

        have, need = ray.cluster_resources(), surviving(self.cluster, self.lost)
        for t in self.cluster.gpu_types:
            if have.get(t, 0) < need.gpus_of_type(t):
                raise InputError(self.address_flag, self.address or "local",
                                 f"the Ray cluster advertises {have.get(t, 0):g} '{t}' resources, the cluster "
                                 f"spec needs {need.gpus_of_type(t)}; start its nodes with "
                                 f"ray start --resources '{{\"{t}\": N}}'")

    def _place(self) -> None:
        import ray
        from ray.util.placement_group import placement_group, placement_group_table

        for i, node in enumerate(self.cluster.nodes):   # a node known lost gets no group (None)
            self.groups.append(None if i in self.lost else placement_group(
                [{node.gpu: 1, "CPU": CPU_PER_SLOT, **({"GPU": 1} if self.cuda else {})}] * node.gpus,
                strategy="STRICT_PACK"))
        live = [pg for pg in self.groups if pg is not None]
        ray.get([pg.ready() for pg in live], timeout=self.timeout_s)
        # STRICT_PACK: all of a group's bundles sit on one Ray node, the one whose loss takes them
        self.ray_nodes = [None if pg is None else placement_group_table(pg)["bundles_to_node_id"][0]
                          for pg in self.groups]
        for i, node in enumerate(self.cluster.nodes):
            for j in range(0 if i in self.lost else node.gpus):
                self.slots.append(Slot(f"{i}/{j}", i, node.gpu, self._spawn(i, j), bundle=j))
        ray.get([s.actor.ready.remote() for s in self.slots], timeout=self.timeout_s)  # warm: torch imported
        if self.cuda:   # what each slot's actor sees as its cuda:0 (Ray's CUDA_VISIBLE_DEVICES)
            names = ray.get([s.actor.device_name.remote() for s in self.slots], timeout=self.timeout_s)
            self.device = replace(self.device, names=tuple(names))

    def _spawn(self, node: int, bundle: int):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from gpuwise.runtime.worker import SlotWorker

        return ray.remote(SlotWorker).options(
            num_cpus=CPU_PER_SLOT, num_gpus=1 if self.cuda else 0, resources={self.cluster.nodes[node].gpu: 1},
            max_restarts=-1, max_task_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.groups[node], placement_group_bundle_index=bundle),
        ).remote(f"{node}/{bundle}", "cuda" if self.cuda else "cpu")

    def check_nodes(self) -> list[int]:
        """Spec nodes whose Ray node died since the last call (Ray's node table): their slots are
        marked lost and their actors and placement group removed, so Ray does not keep restarting
        them or reserve their bundles elsewhere; the node is never used again in this run."""
        import ray
        from ray.util.placement_group import remove_placement_group

        try:
            alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        except Exception:  # the GCS did not answer this time (busy, restarting): ask again next poll
            return []
        if not alive:      # no answer worth trusting (the head itself is alive while we talk to it)
            return []
        gone = [i for i, nid in enumerate(self.ray_nodes) if i not in self.lost and nid not in alive]
        for i in gone:
            self.lost.add(i)
            for s in self.slots:
                if s.node == i:
                    s.lost, s.warming = True, None
                    ray.kill(s.actor, no_restart=True)
            remove_placement_group(self.groups[i])
        return gone

    def free_on(self, node: int) -> list[Slot]:
        import ray

        out = []
        for s in self.slots:
            if s.node != node or s.owner is not None or s.lost:
                continue
            if s.warming is not None:
                done, _ = ray.wait([s.warming], timeout=0)
                if not done:
                    continue
                try:
                    ray.get(s.warming, timeout=1.0)
                except ray.exceptions.ActorDiedError:  # dead for good (killed while restarting): replace it
                    ray.kill(s.actor, no_restart=True)
                    s.actor = self._spawn(s.node, s.bundle)
                    s.warming = s.actor.ready.remote()
                    continue
                except Exception:  # asked the dying process: ask the restarted one
                    s.warming = s.actor.ready.remote()
                    continue
                s.warming = None
            out.append(s)
        return out

    def restart(self, slot: Slot) -> None:
        """Kill a slot's actor (Ray restarts it: a fresh process that re-imports torch)."""
        import ray

        if slot.lost:
            return
        ray.kill(slot.actor, no_restart=False)
        slot.warming = slot.actor.ready.remote()

    def release_all(self) -> None:
        """Make every slot free again (after a run that shares this pool; workers stay warm)."""
        import ray

        busy = [s for s in self.slots if s.owner is not None and not s.lost]
        for s in busy:
            try:
                ray.get(s.actor.teardown.remote(), timeout=30.0)
            except Exception:  # a dead or stuck worker: restart it
                self.restart(s)
            s.owner = None

    def shutdown(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        from ray.util.placement_group import remove_placement_group

        for s in self.slots:
            ray.kill(s.actor, no_restart=True)
        for i, pg in enumerate(self.groups):
            if i not in self.lost:
                remove_placement_group(pg)
        self.slots, self.groups = [], []
        if self.started_here:
            ray.shutdown()
            self.head.stop()
