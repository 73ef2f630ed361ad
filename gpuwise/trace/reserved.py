"""The caching allocator's reserve of a training run on one GPU: the recorded allocations of its build and steps
(`allocations`) replayed through the allocator's rules (`allocator`), step after step, at one length or at a
length drawn per micro-batch, until the reserve stops growing.

Fixed length: the steady reserve is reached when a whole step adds no segment (a step's allocations repeat, so
none will). Lengths that vary per micro-batch (unpacked data padded to each batch's longest): segments cut for
short batches cannot serve longer ones and are kept, so the reserve ratchets up with each longer batch; it is
simulated over `steps` steps of lengths drawn from `LengthDist` (seeded), and the result says whether the last
quarter of them still grew it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from fractions import Fraction

from gpuwise.errors import InputError
from gpuwise.trace.allocations import ALLOC, Recording, record_run
from gpuwise.trace.allocator import AllocatorStats, CachingAllocator, OutOfMemory

MIN_KEPT = 0.01          # lognormal:...:drop refused when fewer draws than this fit --seq-len (sampling would not end)
MAX_FIXED_STEPS = 8       # fixed length: steady well before this (a step that adds no segment ends it)
DEFAULT_STEPS = 200       # varying lengths: steps replayed (gpu_measure's varying rows train as many)


@dataclass(frozen=True)
class LengthDist:
    """Tokens per micro-batch: `kind` fixed (always `max_len`), uniform (min_len..max_len) or lognormal (`mean`,
    `sd` of the samples' lengths; longer than max_len: dropped, or clipped to max_len when `clip`)."""

    kind: str
    max_len: int
    min_len: int = 1
    mean: float = 0.0
    sd: float = 0.0
    clip: bool = True

    def _mu_sigma(self) -> tuple[float, float]:
        sigma = math.sqrt(math.log1p((self.sd / self.mean) ** 2))
        return math.log(self.mean) - sigma * sigma / 2, sigma

    def kept(self) -> float:
        """Fraction of lognormal draws not over max_len (those `drop` keeps)."""
        mu, sigma = self._mu_sigma()
        z = math.log(self.max_len + 0.5) - mu
        return float(z > 0) if sigma == 0 else 0.5 * (1 + math.erf(z / (sigma * math.sqrt(2))))

    def sampler(self, seed: int):
        rng = random.Random(seed)
        if self.kind == "fixed":
            return lambda: self.max_len
        if self.kind == "uniform":
            return lambda: rng.randint(self.min_len, self.max_len)
        mu, sigma = self._mu_sigma()

        def draw() -> int:
            while True:
                n = max(1, round(rng.lognormvariate(mu, sigma)))
                if n <= self.max_len:
                    return n
                if self.clip:
                    return self.max_len
        return draw

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"every micro-batch {self.max_len} tokens"
        if self.kind == "uniform":
            return f"micro-batch lengths uniform in {self.min_len}..{self.max_len} tokens"
        return (f"micro-batch lengths lognormal, mean {self.mean:g} sd {self.sd:g} tokens, longer ones "
                + (f"clipped to {self.max_len}" if self.clip else f"dropped (over {self.max_len})"))


def parse_lengths(text: str, max_len: int) -> LengthDist:
    """`fixed`, `uniform:MIN`, `lognormal:MEAN:SD` or `lognormal:MEAN:SD:drop` -> LengthDist (InputError otherwise)."""
    parts = text.split(":")
    try:
        if parts == ["fixed"]:
            return LengthDist("fixed", max_len)
        if parts[0] == "uniform" and len(parts) == 2 and 1 <= int(parts[1]) <= max_len:
            return LengthDist("uniform", max_len, min_len=int(parts[1]))
        if parts[0] == "lognormal" and len(parts) in (3, 4) and parts[3:] in ([], ["drop"]):
            mean, sd = float(parts[1]), float(parts[2])
            dist = LengthDist("lognormal", max_len, mean=mean, sd=sd, clip=parts[3:] != ["drop"])
            finite = math.isfinite(mean) and math.isfinite(sd)
            if finite and mean > 0 and sd >= 0 and math.isfinite(sum(dist._mu_sigma())) and (
                    dist.clip or dist.kept() >= MIN_KEPT):                            # drop: draws must end
                return dist
    except (ValueError, OverflowError):         # e.g. sd / mean too large to square
        pass
    raise InputError("lengths", text, f"use fixed, uniform:MIN (1..{max_len}), lognormal:MEAN:SD or "
                     "lognormal:MEAN:SD:drop (tokens; --seq-len is the longest; drop needs at least "
                     f"{MIN_KEPT:.0%} of the lengths within it)")


@dataclass(frozen=True)
class ReservedResult:
    stats: AllocatorStats        # of the whole simulated run
    steps: int                   # steps simulated
    growing: bool                # the reserve still grew in the last quarter of the steps (not steady)
    lengths: LengthDist
    oom: OutOfMemory | None = None   # the run's out-of-memory error under a capacity (steps: the step it hit)


# A template op: (ALLOC, k, sizes) allocates its segment's k-th block, of sizes[j] bytes at the j-th recorded
# length; (FREE, ref) frees ("b", id): an allocation of the build, or (back, segment, k): of the step `back`
# steps earlier (0: this one).
def _templates(rec: Recording) -> list[list[list[tuple]]]:
    where: dict[int, tuple] = {}
    out = []
    for s, step in enumerate(rec.steps):
        segs = []
        for g, events in enumerate(step):
            ops, k = [], 0
            for kind, i, n in events:
                if kind == ALLOC:
                    where[i] = (s, g, k)
                    ops.append((ALLOC, k, n))
                    k += 1
                elif i in where:
                    s0, g0, k0 = where.pop(i)
                    ops.append((-1, (s - s0, g0, k0)))
                else:
                    ops.append((-1, ("b", i)))
            segs.append(ops)
        out.append(segs)
    return out


def _merge(runs: list[list], lengths: list[int]) -> list:
    """The runs' templates as one, each allocation holding its size at each recorded length (InputError if the
    recordings' structures differ, so no size can be interpolated)."""
    base = runs[0]
    for other in runs[1:]:
        same = len(other) == len(base) and all(
            len(a) == len(b) and all(len(x) == len(y) and all(p[:2] == q[:2] for p, q in zip(x, y))
                                     for x, y in zip(a, b)) for a, b in zip(other, base))
        if not same:
            raise InputError("lengths", ",".join(map(str, lengths)), "this model's step changes its operations with "
                             "the length; use --lengths fixed")
    last, prev = base[-1], base[-2]       # the steady step repeats: it must free what the step before it freed
    if [[op[:2] for op in seg] for seg in last] != [[op[:2] for op in seg] for seg in prev]:
        raise InputError("method", "trace", "the recorded training steps differ from one another, so the steady "
                         "step cannot be repeated; use --method analytic")
    return [[[(op[0], op[1], tuple(r[s][g][i][2] for r in runs)) if op[0] == ALLOC else op
              for i, op in enumerate(seg)] for g, seg in enumerate(step)] for s, step in enumerate(base)]


def _coefficients(sizes: tuple, xs: tuple) -> tuple[float, ...]:
    """Polynomial coefficients (constant first) through the recorded points (x_j, size_j): the Vandermonde
    system solved exactly over rationals."""
    if len(set(sizes)) == 1:
        return (float(sizes[0]),)
    n = len(xs)
    rows = [[Fraction(x) ** k for k in range(n)] + [Fraction(y)] for x, y in zip(xs, sizes)]
    for c in range(n):                                   # Gauss-Jordan; the points are distinct
        p = next(r for r in range(c, n) if rows[r][c] != 0)
        rows[c], rows[p] = rows[p], rows[c]
        rows[c] = [v / rows[c][c] for v in rows[c]]
        for r in range(n):
            if r != c and rows[r][c] != 0:
                f = rows[r][c]
                rows[r] = [a - f * b for a, b in zip(rows[r], rows[c])]
    return tuple(float(rows[k][n]) for k in range(n))


def _size(coef: tuple[float, ...], x: int) -> int:
    if len(coef) == 1:
        return int(coef[0])
    return max(0, round(sum(c * x ** k for k, c in enumerate(coef))))


def _replay_step(alloc: CachingAllocator, tpl, s: int, micro_lengths: list[int]) -> None:
    for g, seg in enumerate(tpl):
        x = micro_lengths[min(g, len(micro_lengths) - 1)]
        for op in seg:
            if op[0] == ALLOC:
                alloc.malloc((s, g, op[1]), _size(op[2], x))
            else:
                ref = op[1]
                handle = ref if ref[0] == "b" else (s - ref[0], ref[1], ref[2])
                if alloc.has(handle):
                    alloc.free(handle)


def _replay_build(alloc: CachingAllocator, rec: Recording) -> None:
    """The build's allocations, under handles ("b", id) that the first steps' frees name."""
    for kind, i, n in rec.build:
        if kind == ALLOC:
            alloc.malloc(("b", i), n)
        elif alloc.has(("b", i)):
            alloc.free(("b", i))


def record_lengths(max_len: int, varying: bool) -> tuple[int, ...]:
    """Lengths to record: the longest, and for varying lengths two more (a quadratic's three points)."""
    if not varying:
        return (max_len,)
    pts = sorted({max_len, max(8, max_len // 2 // 8 * 8), max(4, max_len // 4 // 8 * 8)})
    if len(pts) < 3:
        raise InputError("seq-len", max_len, "varying lengths need --seq-len of at least 32 tokens")
    return tuple(pts)


@dataclass(frozen=True)
class Replay:
    """A run's recorded allocations, ready to replay at any lengths: the build's events and one template per
    recorded step (the last one repeats), each allocation's size a polynomial in its micro-batch's length."""

    build: Recording
    templates: list
    lengths: LengthDist

    def at(self, lengths: LengthDist) -> Replay:
        """The same recording replayed at other lengths (within the recorded longest; a fixed length is exact
        wherever the sizes' polynomials are: at the recorded lengths, and between them for these steps)."""
        if lengths.max_len != self.lengths.max_len or (lengths.kind != "fixed" and self.lengths.kind == "fixed"):
            raise ValueError("a replay at drawn lengths needs a recording at three lengths up to the same longest")
        return replace(self, lengths=lengths)

    def run(self, steps: int = DEFAULT_STEPS, seed: int = 0, capacity: int | None = None) -> ReservedResult:
        """Replay the build and the steps (fixed length: until a step adds no segment); `capacity`: the bytes the
        allocator may reserve (an out-of-memory error ends the run and is returned in the result)."""
        dist, tpls = self.lengths, self.templates
        alloc = CachingAllocator(capacity)
        draw = dist.sampler(seed)
        micro = len(tpls[0]) - 1
        total = MAX_FIXED_STEPS if dist.kind == "fixed" else max(steps, len(tpls))
        history: list[int] = []
        built = False
        try:
            _replay_build(alloc, self.build)
            built = True
            for s in range(total):
                _replay_step(alloc, tpls[min(s, len(tpls) - 1)], s, [draw() for _ in range(micro)])
                history.append(alloc.reserved)
                if dist.kind == "fixed" and s >= len(tpls) and history[-1] == history[-2]:
                    break
        except OutOfMemory as oom:                   # steps: the step it hit (0: the build)
            return ReservedResult(alloc.stats(), len(history) + built, False, dist, oom)
        quarter = history[-max(1, len(history) // 4) - 1]
        return ReservedResult(alloc.stats(), len(history), history[-1] > quarter, dist)


def record(spec, cfg, lengths: LengthDist | None = None) -> Replay:
    """Record `spec` training under `cfg` (one GPU) at the lengths `lengths` needs (FakeTensorMode)."""
    dist = lengths or LengthDist("fixed", cfg.seq_len)
    xs = record_lengths(dist.max_len, dist.kind != "fixed")
    recs = [record_run(spec, cfg, x) for x in xs]
    tpls = _merge([_templates(r) for r in recs], list(xs))
    tpls = [[[(op[0], op[1], _coefficients(op[2], xs)) if op[0] == ALLOC else op for op in seg] for seg in step]
            for step in tpls]
    return Replay(recs[0], tpls, dist)


def simulate_reserved(spec, cfg, lengths: LengthDist | None = None, steps: int = DEFAULT_STEPS,
                      seed: int = 0) -> ReservedResult:
    """The reserve of a run of `spec` under `cfg` (one GPU) through the caching allocator's rules."""
    return record(spec, cfg, lengths).run(steps, seed)


def simulation_refusal(cfg) -> str:
    """Why the allocator is not simulated for `cfg` ('' when it is): one GPU only, as the trace runs it whole."""
    p = cfg.plan
    if max(p.dp, p.tp, p.pp, p.cp) > 1:
        return ("more than one GPU (FSDP's and the collectives' side streams hold blocks the one-stream rules "
                "do not model)")
    if p.zero or cfg.offload_optimizer:
        return "ZeRO or optimizer offload is derived from the trace, not run"
    return ""


def describe(res: ReservedResult) -> str:
    st = res.stats
    return (f"allocator reserve simulated (gpuwise.trace.allocator: PyTorch's caching-allocator rules at the default "
            f"PYTORCH_CUDA_ALLOC_CONF, one stream) over the recorded allocations of the build and {res.steps} "
            f"training steps ({res.lengths.describe()}): reserved {st.peak_reserved / 2 ** 30:.2f} GiB in "
            f"{st.segments} segments, allocated {st.peak_allocated / 2 ** 30:.2f} GiB"
            + ("; still growing in the last quarter of the steps: a longer run may reserve more" if res.growing
               else "; steady") + ("" if res.lengths.kind == "fixed" else "; " + VARYING_CAVEAT))


# what the varying-length mode has been checked against (docs/allocator.md): no measured run of known lengths
VARYING_CAVEAT = ("varying lengths are not validated: on ms-swift's variable-length runs, whose lengths are known only "
                  "by their mean and sd (lognormal assumed), the simulated reserve was -20% to +62% of the measured")


@dataclass(frozen=True)
class DeviceRun:
    """The replayed run on one GPU whose allocator may reserve `capacity` bytes."""

    gpu: str
    capacity: int
    oom: OutOfMemory | None      # None: the run fits
    at_step: int                 # the step that ran out of memory (0: the build; steps count from 1)


def device_runs(replay: Replay, unlimited: ReservedResult, capacities: dict[str, int], steps: int = DEFAULT_STEPS,
                seed: int = 0) -> list[DeviceRun]:
    """The run replayed under each GPU's capacity (same lengths: seed): where the unlimited run's reserve fits
    it cannot fail (the allocator never asks for more); elsewhere it is replayed to its first out-of-memory error."""
    out = []
    for gpu, cap in capacities.items():
        if unlimited.stats.peak_reserved <= cap:
            out.append(DeviceRun(gpu, cap, None, 0))
            continue
        got = replay.run(steps, seed, capacity=cap)
        out.append(DeviceRun(gpu, cap, got.oom, got.steps if got.oom else 0))
    return out


def reported_reserved(traced_allocated: float, res: ReservedResult) -> float:
    """The reserved peak `memory --method trace` reports: the simulated reserve (what `validate gpu
    --simulate-allocator` scores), never below the traced tensors' allocated peak."""
    return max(float(traced_allocated), float(res.stats.peak_reserved))


def capacity_bytes(gpu) -> int:
    """What the allocator may reserve on `gpu` (a GpuSpec): the memory PyTorch reports less the CUDA context."""
    from gpuwise.estimate.overhead import context_bytes

    return int(gpu.total_gib * 2 ** 30 - context_bytes())


def simulate_on(spec, cfg, lengths: LengthDist | None, capacities: dict[str, int],
                steps: int = DEFAULT_STEPS) -> tuple[ReservedResult, list[DeviceRun]]:
    """The unlimited run of `spec` under `cfg` and its replays at each capacity (`device_runs`)."""
    return replay_on(record(spec, cfg, lengths), capacities, steps)


def replay_on(replay: Replay, capacities: dict[str, int],
              steps: int = DEFAULT_STEPS) -> tuple[ReservedResult, list[DeviceRun]]:
    """A recording's unlimited run and its replays at each capacity (`device_runs`)."""
    res = replay.run(steps)
    return res, device_runs(replay, res, capacities, steps)
