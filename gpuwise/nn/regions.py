"""Marks the attention core (scores, softmax, dropout, probabilities x V) while it runs, so that a
selective-checkpoint policy can recompute exactly Megatron-core's "selective" region."""

from __future__ import annotations

from contextlib import contextmanager

_depth = [0]


@contextmanager
def attention_core():
    _depth[0] += 1
    try:
        yield
    finally:
        _depth[0] -= 1


def in_attention_core() -> bool:
    return _depth[0] > 0
