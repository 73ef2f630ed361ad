"""Torch side of the runtime's small models (imported inside workers only): build the model with
`gpuwise.nn` and generate its data.

Data are chosen from the global step number: step s of a job draws its global batch from a
generator seeded by (job seed, s), and rank r of W takes its contiguous share of it, so the same
step gives the same samples at any width -- a job resumes exactly after any rescale.

- lm: text from a fixed random bigram chain (each token prefers a few successors), so there is
  structure to learn: the next-token loss falls from ln(vocab) towards the chain's entropy;
- image: each class is a fixed random template (a colour plus a pattern); a sample is its template
  plus Gaussian noise.
"""

from __future__ import annotations

import torch
from torch import nn

from gpuwise.runtime.small_models import SmallModel

NOISE = 1.0  # image noise (std) around the class templates


def build(m: SmallModel, seed: int, device: torch.device | str = "cpu") -> nn.Module:
    """The model with the same initial weights on every rank (seeded, built on the CPU, then moved to
    ``device``); `model(x, y)` is its loss."""
    from gpuwise.nn import build_model, build_resnet

    torch.manual_seed(seed)
    model = build_resnet(m.config) if m.kind == "image" else build_model(m.spec)
    return model.to(device)


class Data:
    """Generated samples of one job: a fixed "world" (bigram chain / class templates) from its seed."""

    def __init__(self, m: SmallModel, seed: int) -> None:
        self.m, self.seed = m, seed
        g = torch.Generator().manual_seed(seed)
        if m.kind == "lm":
            self.trans = torch.softmax(torch.randn(m.classes, m.classes, generator=g) * 3.0, dim=1)
        else:
            c, n = m.config.get("num_channels", 3), m.image_size
            # a colour per class (what global pooling sees at once) plus a spatial pattern
            self.templates = (torch.randn(m.classes, c, 1, 1, generator=g)
                              + 0.5 * torch.randn(m.classes, c, n, n, generator=g))

    def global_batch(self, step: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        if self.m.kind == "lm":
            n = self.m.seq_len
            seq = torch.empty(batch, n + 1, dtype=torch.long)
            seq[:, 0] = torch.randint(0, self.m.classes, (batch,), generator=g)
            for t in range(n):
                seq[:, t + 1] = torch.multinomial(self.trans[seq[:, t]], 1, generator=g)[:, 0]
            return seq[:, :-1], seq[:, 1:]
        y = torch.randint(0, self.m.classes, (batch,), generator=g)
        return self.templates[y] + NOISE * torch.randn(batch, *self.templates.shape[1:], generator=g), y

    def local_batch(self, step: int, batch: int, rank: int, world: int):
        """Rank ``rank``'s contiguous share of step ``step``'s global batch."""
        x, y = self.global_batch(step, batch)
        lo, hi = share(batch, rank, world)
        return x[lo:hi], y[lo:hi]


def share(batch: int, rank: int, world: int) -> tuple[int, int]:
    """[lo, hi) of rank's samples: the first batch % world ranks take one extra."""
    base, extra = divmod(batch, world)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)
