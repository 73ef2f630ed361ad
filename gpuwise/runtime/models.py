"""The runtime's small real models and their generated data (torch; imported inside workers only).

Minimal definitions written for the runtime (the project's transformer definitions from ModelSpec
presets were not on main when this was written; the integrator may swap `TinyGPT` for them):

- ``tiny-gpt``: a 2-layer decoder-only transformer (d=64, 4 heads, context 32, vocabulary 64) on
  text generated from a fixed random bigram chain, so there is structure to learn (next-token loss
  falls from ln 64 = 4.16 towards the chain's entropy);
- ``tiny-resnet``: a 2-block residual CNN (16 channels) on 3x16x16 images of 10 classes, each a
  fixed random template plus Gaussian noise.

Data are chosen from the global step number: step s of a job draws its global batch from a
generator seeded by (job seed, s), and rank r of W takes its contiguous share of it, so the same
step gives the same samples at any width -- a job resumes exactly after any rescale.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

MODELS = ("tiny-gpt", "tiny-resnet")
VOCAB, CONTEXT = 64, 32
IMAGE, CLASSES = 16, 10


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, layers: int = 2, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(torch.zeros(CONTEXT, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((CONTEXT, CONTEXT), float("-inf")), 1))

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        h = self.tok(x) + self.pos[: x.shape[1]]
        for b in self.blocks:
            h = b(h, self.mask[: x.shape[1], : x.shape[1]])
        return F.cross_entropy(self.head(self.ln(h)).reshape(-1, VOCAB), y.reshape(-1))


class ResBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
        self.n1, self.n2 = nn.GroupNorm(4, c), nn.GroupNorm(4, c)  # no batch statistics: width-agnostic

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.n2(self.c2(F.relu(self.n1(self.c1(x))))))


class TinyResNet(nn.Module):
    def __init__(self, blocks: int = 2, c: int = 16) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.blocks = nn.Sequential(*(ResBlock(c) for _ in range(blocks)))
        self.fc = nn.Linear(c, CLASSES)

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        h = self.blocks(F.relu(self.stem(x)))
        return F.cross_entropy(self.fc(h.mean(dim=(2, 3))), y)


def build(model: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)  # every rank starts from the same weights
    return TinyGPT() if model == "tiny-gpt" else TinyResNet()


class Data:
    """Generated samples of one job: fixed "world" (bigram chain / class templates) from its seed."""

    def __init__(self, model: str, seed: int) -> None:
        self.model, self.seed = model, seed
        g = torch.Generator().manual_seed(seed)
        if model == "tiny-gpt":  # sparse-ish transitions: each token prefers a few successors
            logits = torch.randn(VOCAB, VOCAB, generator=g) * 3.0
            self.trans = torch.softmax(logits, dim=1)
        else:
            self.templates = torch.randn(CLASSES, 3, IMAGE, IMAGE, generator=g)

    def global_batch(self, step: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        if self.model == "tiny-gpt":
            seq = torch.empty(batch, CONTEXT + 1, dtype=torch.long)
            seq[:, 0] = torch.randint(0, VOCAB, (batch,), generator=g)
            for t in range(CONTEXT):
                seq[:, t + 1] = torch.multinomial(self.trans[seq[:, t]], 1, generator=g)[:, 0]
            return seq[:, :-1], seq[:, 1:]
        y = torch.randint(0, CLASSES, (batch,), generator=g)
        x = self.templates[y] + 1.5 * torch.randn(batch, 3, IMAGE, IMAGE, generator=g)
        return x, y

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


def initial_loss(model: str) -> float:
    """Loss of a uniform guess (what an untrained model starts near)."""
    return math.log(VOCAB if model == "tiny-gpt" else CLASSES)
