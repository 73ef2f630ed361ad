"""The bundled trainer of model + data jobs: a causal language model from Hugging Face transformers
(random weights from its config, or local weights) trained on local text with gpuwise.elastic.

    python -m gpuwise.elastic.trainer --model tiny-llama --data corpus.txt [--weights DIR] [--tokenizer DIR]

``--model``: a preset (a config of gpuwise/data/runtime_models, e.g. tiny-llama), a config.json, or a
Hugging Face id already in the local cache (nothing is downloaded). ``--tokenizer``: a local tokenizer
folder; without one the text is tokenized as UTF-8 bytes and the model's vocabulary is set to 256.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def model_config(ref: str, vocab: int | None):
    """A transformers config from a preset, a config.json or a cached HF id; ``vocab``: the fallback
    tokenizer's vocabulary (replaces the config's)."""
    from transformers import AutoConfig

    from gpuwise.data import data_path

    preset = data_path("runtime_models", f"{ref}.json")
    path = preset if preset.exists() else Path(ref)
    if path.suffix == ".json" and path.exists():
        raw = {k: v for k, v in json.loads(path.read_text()).items() if k != "gpuwise"}
        cfg = AutoConfig.for_model(raw.pop("model_type"), **raw)
    else:
        try:
            cfg = AutoConfig.from_pretrained(ref, local_files_only=True)
        except OSError:
            raise SystemExit(f"--model {ref}: not a preset, a config.json or a Hugging Face id in the local "
                             "cache (nothing is downloaded); give a config.json") from None
    if vocab is not None:
        cfg.vocab_size = vocab
    return cfg


def build(args, tok):
    import torch
    from transformers import AutoModelForCausalLM

    from gpuwise.elastic.text import ByteTokenizer

    vocab = tok.vocab_size if isinstance(tok, ByteTokenizer) else None
    torch.manual_seed(args.seed)
    if args.weights:
        return AutoModelForCausalLM.from_pretrained(args.weights, local_files_only=True), f"weights {args.weights}"
    cfg = model_config(args.model, vocab)
    return AutoModelForCausalLM.from_config(cfg), f"random weights from the config of {args.model}"


def main(argv=None) -> None:
    import torch

    from gpuwise import elastic
    from gpuwise.elastic.text import text_blocks, tokenizer

    ap = argparse.ArgumentParser(prog="gpuwise.elastic.trainer")
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--weights")
    ap.add_argument("--tokenizer")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--chunk", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--job-dir", default="gpuwise-job/model")
    args = ap.parse_args(argv)

    s = elastic.init(job_dir=args.job_dir, seed=args.seed)
    tok = tokenizer(args.tokenizer)
    net, origin = build(args, tok)
    if s.rank == 0:
        n = sum(p.numel() for p in net.parameters())
        print(f"model {args.model}: {type(net).__name__}, {n:,} parameters, {origin}; tokenizer {tok.name}"
              + ("" if args.tokenizer else " (fallback: no --tokenizer given)"), flush=True)
    model = elastic.model(net)
    opt = elastic.optimizer(torch.optim.AdamW(model.parameters(), lr=args.lr), scaling="sqrt")
    loader = elastic.DataLoader(text_blocks(args.data, args.seq_len, tok), batch_size=args.batch)
    for _ in elastic.steps(total=args.steps, chunk=args.chunk):
        batch = {k: v.to(s.device) for k, v in loader.batch().items()}
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        elastic.report(loss=loss)


if __name__ == "__main__":
    main()
