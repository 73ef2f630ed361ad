"""A user's training script: a small Llama-architecture model (Hugging Face transformers, built from a
config with random weights) trained on a bundled Shakespeare text, with gpuwise.elastic.

    torchrun --nproc-per-node 2 examples/byo/train.py          # plain DDP with checkpoints
    gpuwise run --workload examples/byo/workload.yaml ...       # elastic: rescaled and preempted

Run again with the same --job-dir and it resumes from the newest checkpoint.
"""

import argparse
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from gpuwise import elastic
from gpuwise.elastic.text import BYTE_VOCAB, text_blocks

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16, help="global batch the LR is tuned at")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=20, help="steps between checkpoints")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--data", default=str(HERE / "data" / "shakespeare.txt"))
    ap.add_argument("--job-dir", default="gpuwise-job/byo-train")
    args = ap.parse_args()

    s = elastic.init(job_dir=args.job_dir)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=BYTE_VOCAB, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=args.seq_len)
    model = elastic.model(LlamaForCausalLM(config))
    opt = elastic.optimizer(torch.optim.AdamW(model.parameters(), lr=args.lr), scaling="sqrt")
    loader = elastic.DataLoader(text_blocks(args.data, args.seq_len), batch_size=args.batch)

    for step in elastic.steps(total=args.steps, chunk=args.chunk):
        batch = {k: v.to(s.device) for k, v in loader.batch().items()}
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        elastic.report(loss=loss)


if __name__ == "__main__":
    main()
