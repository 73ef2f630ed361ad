"""Residual CNNs of our own (He et al. 2016, basic blocks), built from a small config dict.

The CIFAR variant Pollux trains (resnet18-cifar10: a 3x3 stem, no max-pool) is
``{"embedding_size": 64, "hidden_sizes": [64, 128, 256, 512], "depths": [2, 2, 2, 2], "num_labels": 10}``
(11,173,962 parameters, the preset's published count). Key names follow Hugging Face's ResNetConfig;
``"norm": "group"`` swaps BatchNorm for GroupNorm with the same parameters, whose output does not
depend on the batch, so data-parallel training gives the same result at any width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

NORMS = ("batch", "group")


@dataclass(frozen=True)
class ResNetConfig:
    embedding_size: int = 64                          # stem channels
    hidden_sizes: tuple[int, ...] = (64, 128, 256, 512)  # channels of each stage
    depths: tuple[int, ...] = (2, 2, 2, 2)            # basic blocks per stage
    num_labels: int = 10
    num_channels: int = 3                             # input image channels
    norm: str = "batch"

    @classmethod
    def from_dict(cls, cfg: dict, where: str = "config") -> "ResNetConfig":
        from gpuwise.errors import InputError

        known = set(cls.__dataclass_fields__)
        extra = sorted(k for k in cfg if k not in known and k not in ("model_type", "gpuwise"))
        if extra:
            raise InputError(f"{where}: {extra[0]}", cfg[extra[0]], "unknown key; valid: " + ", ".join(sorted(known)))
        out = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items() if k in known})
        if len(out.hidden_sizes) != len(out.depths) or not out.depths:
            raise InputError(f"{where}: depths", list(out.depths), "give one depth per entry of hidden_sizes")
        if out.norm not in NORMS:
            raise InputError(f"{where}: norm", out.norm, "use batch or group")
        return out


def _norm(kind: str, c: int) -> nn.Module:
    return nn.BatchNorm2d(c) if kind == "batch" else nn.GroupNorm(min(4, c), c)


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, norm: str):
        super().__init__()
        self.c1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.n1 = _norm(norm, c_out)
        self.c2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.n2 = _norm(norm, c_out)
        self.skip = None
        if stride != 1 or c_in != c_out:  # projection shortcut (1x1 conv + norm)
            self.skip = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), _norm(norm, c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.n2(self.c2(F.relu(self.n1(self.c1(x)))))
        return F.relu(h + (x if self.skip is None else self.skip(x)))


class ResNet(nn.Module):
    """`model(images)` -> logits; `model(images, labels)` -> cross-entropy loss."""

    def __init__(self, cfg: ResNetConfig):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(cfg.num_channels, cfg.embedding_size, 3, 1, 1, bias=False),
                                  _norm(cfg.norm, cfg.embedding_size), nn.ReLU())
        blocks, c = [], cfg.embedding_size
        for i, (width, depth) in enumerate(zip(cfg.hidden_sizes, cfg.depths)):
            for j in range(depth):  # every stage after the first halves the resolution
                blocks.append(BasicBlock(c, width, 2 if i > 0 and j == 0 else 1, cfg.norm))
                c = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, cfg.num_labels)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.fc(self.blocks(self.stem(x)).mean(dim=(2, 3)))
        return logits if labels is None else F.cross_entropy(logits.float(), labels)


def build_resnet(cfg: ResNetConfig | dict) -> ResNet:
    return ResNet(cfg if isinstance(cfg, ResNetConfig) else ResNetConfig.from_dict(cfg))
