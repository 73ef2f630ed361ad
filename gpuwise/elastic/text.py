"""Training text for causal language models: a text file, a JSONL file (one ``{"text": ...}`` per line)
or a folder saved by Hugging Face ``datasets`` (``save_to_disk``), tokenized by a local tokenizer
folder or -- when none is given -- by bytes (UTF-8 bytes are the tokens, vocabulary 256), cut into
blocks of ``seq_len`` tokens. Each sample is ``{"input_ids", "labels"}`` (the model shifts the labels)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

BYTE_VOCAB = 256


class ByteTokenizer:
    """The fallback tokenizer: UTF-8 bytes."""

    vocab_size = BYTE_VOCAB
    name = "bytes (UTF-8, vocabulary 256)"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


class HFTokenizer:
    def __init__(self, folder: str) -> None:
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        self.vocab_size = len(self.tok)
        self.name = f"{folder} ({type(self.tok).__name__}, vocabulary {self.vocab_size})"

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]


def tokenizer(folder: str | None):
    return HFTokenizer(folder) if folder else ByteTokenizer()


def read_texts(path: str | Path) -> list[str]:
    """The documents of ``path``: a text file (one document), JSONL (``text`` of each line) or a saved
    ``datasets`` folder (its ``text`` column)."""
    p = Path(path)
    if p.is_dir():
        try:
            from datasets import load_from_disk
        except ImportError:
            raise ValueError(f"{p} is a folder: a saved `datasets` dataset needs `pip install datasets`") from None
        ds = load_from_disk(str(p))
        ds = ds["train"] if hasattr(ds, "keys") and "train" in ds.keys() else ds
        return list(ds["text"])
    if p.suffix.lower() in (".jsonl", ".json"):
        return [json.loads(line)["text"] for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [p.read_text(encoding="utf-8")]


class TokenBlocks(torch.utils.data.Dataset):
    def __init__(self, ids: list[int], seq_len: int) -> None:
        n = len(ids) // seq_len
        if n < 1:
            raise ValueError(f"{len(ids)} tokens: fewer than one block of {seq_len}")
        self.blocks = torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


def text_blocks(path: str | Path, seq_len: int, tok=None) -> TokenBlocks:
    tok = tok or ByteTokenizer()
    ids: list[int] = []
    for t in read_texts(path):
        ids += tok.encode(t)
    return TokenBlocks(ids, seq_len)
