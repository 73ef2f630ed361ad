"""Speedup functions s(k) of a job type on k GPUs, with s(1) = 1 (paper A.1).

Each family answers the one question the solver asks: the width minimising (1 + mu*k)/s(k) on
[1, cap] (paper A.3.1), in closed form for power law and Amdahl (table A.3.2) and by scanning
breakpoints for piecewise-linear (measured) speedups, where (1 + mu*k)/s(k) is a ratio of affine
functions between breakpoints and so attains its minimum at one of them (A.3.6).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace

import numpy as np

from gpuwise.errors import InputError


class Speedup(ABC):
    """s(k) on [1, cap]; concave, non-decreasing, s(1) = 1."""

    cap: float  # largest usable width (math.inf when unbounded)

    @abstractmethod
    def __call__(self, k): ...

    @abstractmethod
    def inverse(self, y):
        """The width k with s(k) = y, for y in [1, s(cap)]."""

    @abstractmethod
    def best_width(self, mu: float) -> float:
        """argmin over k in [1, cap] of (1 + mu*k)/s(k), for mu >= 0."""

    @abstractmethod
    def describe(self) -> str: ...

    @property
    def is_linear(self) -> bool:
        """k/s(k) constant: widening costs nothing, so a cap is required (paper A.3.4)."""
        return False

    @property
    def is_piecewise_linear(self) -> bool:
        """Piecewise-linear speedups have a width that jumps with mu (ties are mixed)."""
        return False

    def with_cap(self, cap: float | None) -> "Speedup":
        if cap is None:
            return self
        return replace(self, cap=min(self.cap, float(cap)))

    def cost_per_work(self, k):
        """GPU-hours per unit of work at width k: k/s(k) (paper Lemma 2)."""
        return np.asarray(k, dtype=float) / self(k)

    def best_integer_width(self, mu: float) -> int:
        """argmin over whole widths 1..floor(cap) of (1 + mu*k)/s(k).

        (1 + mu*k)/s(k) is unimodal for concave s (A.3.1), so the integer minimiser is the
        floor or the ceiling of the continuous one."""
        top = math.floor(self.cap) if math.isfinite(self.cap) else math.inf
        kc = self.best_width(mu)
        if not math.isfinite(kc):
            return top
        lo = max(1, min(math.floor(kc), top))
        hi = max(1, min(math.ceil(kc), top))
        if lo == hi:
            return int(lo)
        g_lo = (1 + mu * lo) / float(self(lo))
        g_hi = (1 + mu * hi) / float(self(hi))
        return int(hi if g_hi < g_lo else lo)


def _closed_form_width(x: float, mu: float, cap: float, interior) -> float:
    """best_width of a one-parameter family with x in [0, 1] (0: no speedup, 1: linear): width 1
    when widening never helps, the cap when it is free (linear or mu = 0), otherwise the
    stationary point `interior()` of table A.3.2 clipped to [1, cap]."""
    if x <= 0.0:
        return 1.0
    if x >= 1.0 or mu <= 0.0:
        return cap
    return min(max(interior(), 1.0), cap)


@dataclass(frozen=True)
class PowerSpeedup(Speedup):
    """s(k) = k^p, 0 <= p <= 1 (p = 1 is linear and needs a cap)."""

    p: float                  # exponent: 0 (no speedup) .. 1 (linear)
    cap: float = math.inf     # maximum width

    def __call__(self, k):
        k = np.minimum(np.asarray(k, dtype=float), self.cap)
        return k ** self.p

    def inverse(self, y):
        return np.asarray(y, dtype=float) ** (1.0 / self.p)

    @property
    def is_linear(self) -> bool:
        return self.p >= 1.0

    def best_width(self, mu: float) -> float:
        # phi(k) = k(1-p)/p = 1/mu  ->  k = p/((1-p) mu)   (table A.3.2)
        return _closed_form_width(self.p, mu, self.cap, lambda: self.p / ((1.0 - self.p) * mu))

    def describe(self) -> str:
        return f"power law k^{self.p:g}" + (f" up to {self.cap:g} GPUs" if math.isfinite(self.cap) else "")


@dataclass(frozen=True)
class AmdahlSpeedup(Speedup):
    """s(k) = 1/((1-f) + f/k), parallel fraction 0 <= f <= 1 (f = 1 is linear)."""

    f: float                  # parallel fraction of the work
    cap: float = math.inf     # maximum width

    def __call__(self, k):
        k = np.minimum(np.asarray(k, dtype=float), self.cap)
        return 1.0 / ((1.0 - self.f) + self.f / k)

    def inverse(self, y):
        y = np.asarray(y, dtype=float)
        return self.f / (1.0 / y - (1.0 - self.f))

    @property
    def is_linear(self) -> bool:
        return self.f >= 1.0

    def best_width(self, mu: float) -> float:
        # phi(k) = (1-f)k^2/f = 1/mu  ->  k = sqrt(f/((1-f) mu))   (table A.3.2)
        return _closed_form_width(self.f, mu, self.cap, lambda: math.sqrt(self.f / ((1.0 - self.f) * mu)))

    def describe(self) -> str:
        return f"Amdahl, parallel fraction {self.f:g}" + (
            f", up to {self.cap:g} GPUs" if math.isfinite(self.cap) else "")


@dataclass(frozen=True)
class PiecewiseLinearSpeedup(Speedup):
    """Concave piecewise-linear speedup through breakpoints (widths[0] = 1, speeds[0] = 1).

    Built by `from_table`, which replaces measured points by their upper concave hull: the
    paper's exchange argument needs true concavity, and time-sharing two widths achieves the
    hull anyway (A.3.4, A.7 item 1)."""

    widths: tuple[float, ...]    # breakpoints, increasing, first = 1
    speeds: tuple[float, ...]    # s at the breakpoints, first = 1, concave and non-decreasing
    cap: float = math.inf        # maximum width (the table ends at its last breakpoint anyway)
    notes: tuple[str, ...] = field(default=(), compare=False)  # what the hull changed

    def __post_init__(self):
        object.__setattr__(self, "cap", min(self.cap, self.widths[-1]))

    def __call__(self, k):
        k = np.minimum(np.asarray(k, dtype=float), self.cap)
        return np.interp(k, self.widths, self.speeds)

    def inverse(self, y):
        return np.interp(np.asarray(y, dtype=float), self.speeds, self.widths)

    @property
    def is_linear(self) -> bool:
        return all(abs(s - w) < 1e-12 for w, s in zip(self.widths, self.speeds))

    @property
    def is_piecewise_linear(self) -> bool:
        return True

    def _points(self) -> tuple[np.ndarray, np.ndarray]:
        w = np.asarray(self.widths)
        keep = w <= self.cap + 1e-12
        ws, ss = w[keep], np.asarray(self.speeds)[keep]
        if ws[-1] < self.cap - 1e-12:  # a cap between breakpoints is itself a breakpoint
            ws, ss = np.append(ws, self.cap), np.append(ss, self(self.cap))
        return ws, ss

    def best_width(self, mu: float) -> float:
        ws, ss = self._points()
        g = (1.0 + mu * ws) / ss
        return float(ws[int(np.argmin(g))])

    def best_integer_width(self, mu: float) -> int:
        top = int(math.floor(self.cap))
        ks = np.arange(1, top + 1, dtype=float)
        g = (1.0 + mu * ks) / self(ks)
        return int(ks[int(np.argmin(g))])

    def describe(self) -> str:
        pts = ", ".join(f"{w:g}:{s:.3g}" for w, s in zip(self.widths, self.speeds))
        return f"measured table (concave hull {pts})"

    @classmethod
    def from_table(cls, table: dict[float, float], field_name: str = "speedup.table") -> "PiecewiseLinearSpeedup":
        """Concave hull of measured (width, speedup) points; refuses what the theory cannot use."""
        if not table:
            raise InputError(field_name, table, "give at least the point 1: 1.0 and one wider measurement")
        pts = sorted((float(k), float(v)) for k, v in table.items())
        for k, v in pts:
            if not (k >= 1 and math.isfinite(k)) or not (v > 0 and math.isfinite(v)):
                raise InputError(f"{field_name}[{k:g}]", v, "widths must be >= 1 and speedups > 0")
        if pts[0][0] != 1.0:
            raise InputError(field_name, table, "include the single-GPU point 1: 1.0 (speedups are relative to one GPU)")
        notes: list[str] = []
        s1 = pts[0][1]
        if abs(s1 - 1.0) > 1e-12:
            pts = [(k, v / s1) for k, v in pts]
            notes.append(f"table normalised by s(1) = {s1:g}")
        for k, v in pts:
            if v > k * (1 + 1e-9):
                raise InputError(f"{field_name}[{k:g}]", v * s1,
                                 f"a speedup above linear (s({k:g}) > {k:g}) breaks the model; cap it at {k:g}")
        # Beyond the fastest point more GPUs only cost more: end the table there.
        best = max(range(len(pts)), key=lambda i: (pts[i][1], -i))
        if best < len(pts) - 1:
            notes.append(f"points beyond k={pts[best][0]:g} (the fastest) dropped")
            pts = pts[: best + 1]
        hull: list[tuple[float, float]] = []
        for p in pts:  # upper hull, monotone chain
            while len(hull) >= 2:
                (x1, y1), (x2, y2) = hull[-2], hull[-1]
                if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:  # hull[-1] on/below chord
                    hull.pop()
                else:
                    break
            hull.append(p)
        dropped = [k for k, _ in pts if k not in {h[0] for h in hull}]
        if dropped:
            notes.append("non-concave points replaced by the concave hull at k=" + ",".join(f"{k:g}" for k in dropped))
        return cls(tuple(h[0] for h in hull), tuple(h[1] for h in hull), notes=tuple(notes))


def from_mapping(value: dict, field_name: str = "speedup") -> Speedup:
    """One of {power: p}, {amdahl: f}, {linear: true}, {table: {k: s}} (the YAML form)."""
    if not isinstance(value, dict) or len(value) != 1:
        raise InputError(field_name, value, "give exactly one of {power: p}, {amdahl: f}, {linear: true}, {table: {1: 1.0, 2: 1.9}}")
    (kind, arg), = value.items()
    kind = str(kind).lower()
    if kind in ("power", "amdahl"):
        try:
            x = float(arg)
        except (TypeError, ValueError):
            raise InputError(f"{field_name}.{kind}", arg, "must be a number in [0, 1]") from None
        if not 0.0 <= x <= 1.0:
            raise InputError(f"{field_name}.{kind}", arg, "must be in [0, 1] (1 = linear speedup)")
        return PowerSpeedup(x) if kind == "power" else AmdahlSpeedup(x)
    if kind == "linear":
        return PowerSpeedup(1.0)
    if kind == "table":
        if not isinstance(arg, dict):
            raise InputError(f"{field_name}.table", arg, "must map widths to speedups, e.g. {1: 1.0, 2: 1.9, 4: 3.4}")
        try:
            table = {float(k): float(v) for k, v in arg.items()}
        except (TypeError, ValueError):
            raise InputError(f"{field_name}.table", arg, "widths and speedups must be numbers") from None
        return PiecewiseLinearSpeedup.from_table(table, f"{field_name}.table")
    from gpuwise.errors import did_you_mean
    raise InputError(field_name, kind, did_you_mean(kind, ["power", "amdahl", "linear", "table"]))
