"""The unsloth stack (stacks.csv / model_code.csv rows read from Unsloth's code at b9fe2588): each default's memory
effect by its own mechanism, its assumption lines, the one-GPU rule in searches and job specs, and the Unsloth
README context rows it is checked on (nothing fitted on them)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpuwise.cli.main import main
from gpuwise.errors import InputError
from gpuwise.estimate import activations as act
from gpuwise.estimate.memory import estimate_memory
from gpuwise.workload.models import load_model
from gpuwise.workload.training import ParallelPlan, TrainingConfig

L8 = load_model("llama-3.1-8b")
QLORA = TrainingConfig(micro_batch=1, seq_len=16384, precision="bf16-mixed", lora_rank=32, lora_targets="all-linear",
                       quantize="nf4", recompute="full")


def test_unsloth_qlora_peak_is_lower_than_hf_trainer_for_its_stated_reasons():
    uns, hf = estimate_memory(L8, replace(QLORA, stack="unsloth")), estimate_memory(L8, replace(QLORA, stack="hf-trainer"))
    tokens = QLORA.seq_len
    assert uns.allocated < hf.allocated / 3
    # the loss: HF keeps float32 log-softmax and makes two float32 vocabulary-wide gradients; CCE only its lse and
    # the gradients of the hidden states and of the (frozen) output matrix
    eager = estimate_memory(L8, replace(QLORA, stack="unsloth", loss_kernel="eager"))
    assert eager.allocated - uns.allocated > tokens * L8.vocab_size * 4
    # checkpoints: hf keeps every block's (float32) input on the GPU, unsloth 2 blocks' bf16 inputs
    per_block = tokens * L8.hidden * 2
    assert hf.activations - uns.activations > (L8.n_layers - 2) * per_block
    # the stack's offloaded checkpoints are the activation-offload lever on the checkpointed inputs: same numbers
    asked = estimate_memory(L8, replace(QLORA, stack="unsloth", activation_offload=True))
    assert asked.allocated == uns.allocated
    # 16-bit embeddings, norms and lm_head (Unsloth's own prepare_model_for_kbit_training casts only the adapters)
    assert hf.parameters - uns.parameters == pytest.approx(2 * (2 * L8.vocab_size * L8.hidden + (2 * L8.n_layers + 1)
                                                                * L8.hidden))


def test_cce_keeps_no_logits_and_allocates_its_two_gradients():
    st = act.ActivationSetting(micro_batch=1, seq_len=8192)
    tokens = 8192
    assert act.head_bytes(L8, st, loss="cce") == tokens * (L8.hidden * 4 + 4)      # final norm in/out + float32 lse
    assert act.loss_transient_bytes(L8, st, loss="cce") == 2 * L8.hidden * (tokens + L8.vocab_size)
    # per extra token CCE adds a hidden-wide gradient, a chunked fused-linear kernel a vocabulary-wide chunk
    long = replace(st, seq_len=8 * tokens)
    grow = {k: act.loss_transient_bytes(L8, long, loss=k) - act.loss_transient_bytes(L8, st, loss=k)
            for k in ("cce", "fused-linear")}
    assert grow["cce"] == 7 * tokens * L8.hidden * 2 and grow["fused-linear"] > 10 * grow["cce"]


def test_fused_lora_mlp_keeps_gate_and_up_and_xformers_expands_kv():
    """recompute none (everything kept), LoRA on every linear, no quantisation (no float32 rest in hf-trainer): the
    difference per layer is LoRA_MLP's dropped activation and product (2 ffn-wide bf16 tensors) less the
    expanded K and V of the xformers path (kept at query-head width)."""
    cfg = replace(QLORA, quantize=None, recompute="none", seq_len=4096, loss_kernel="cce")
    uns, hf = estimate_memory(L8, replace(cfg, stack="unsloth")), estimate_memory(L8, replace(cfg, stack="hf-trainer"))
    dq, dkv = L8.n_heads * L8.head_dim, L8.n_kv_heads * L8.head_dim
    per_layer = 4096 * 2 * (2 * L8.ffn_hidden - 2 * (dq - dkv))
    # hf-trainer's own facts besides: two RMSNorm float32 input copies (2 B more each) and PEFT's per-adapter 16-bit
    # input casts (q, k, v: two copies beyond one; gate, up: one; o: its own beside flash attention's output) per
    # layer, and the final norm's float32 copy
    hf_own = L8.n_layers * 4096 * (L8.hidden * (2 * 2 + 3 * 2) + dq * 2) + 4096 * L8.hidden * 2
    assert hf.activations - uns.activations == pytest.approx(L8.n_layers * per_layer + hf_own)
    # its backward writes the activation's gradients into the saved gate/up buffers: one ffn-wide gradient fewer
    st = act.ActivationSetting(micro_batch=1, seq_len=4096)
    assert (act.backward_transient_bytes(L8, st) - act.backward_transient_bytes(L8, replace(st, mlp_bwd_ffn=1))
            == 4096 * 2 * L8.ffn_hidden)
    # without adapters on the MLP the fused kernel does not run
    qv = replace(cfg, lora_targets="q,v")
    u2, h2 = estimate_memory(L8, replace(qv, stack="unsloth")), estimate_memory(L8, replace(qv, stack="hf-trainer"))
    hf_qv = L8.n_layers * 4096 * L8.hidden * (2 * 2 + 2) + 4096 * L8.hidden * 2    # norms, the v adapter's copy
    assert h2.activations - u2.activations == pytest.approx(-L8.n_layers * 4096 * 2 * 2 * (dq - dkv) + hf_qv)


def test_assumptions_state_every_unsloth_default(capsys):
    assert main(["memory", "llama-3.1-8b", "--stack", "unsloth", "--lora-rank", "32", "--lora-targets", "all-linear",
                 "--quantize", "nf4", "--recompute", "full", "--seq-len", "16384", "--json"]) == 0
    a = json.loads(capsys.readouterr().out)["assumptions"]
    for start in ("loss kernel cce (unsloth default)", "checkpoints offloaded (unsloth default",
                  "optimizer implementation foreach (unsloth default)", "stack unsloth (gpuwise/data/stacks",
                  "unsloth model code: NF4 0.5159"):
        assert any(x.startswith(start) for x in a), start
    assert any("fused LoRA MLP keeps the input and the gate and up outputs" in x for x in a)
    assert any("embeddings, norms and output layer stay in the load dtype (16-bit)" in x for x in a)
    assert any("one GPU only" in x and "b9fe2588" in x for x in a)
    # at most 1024 tokens Unsloth materialises 16-bit logits (its Triton cross-entropy); without a checkpointing
    # policy there is nothing to offload: both said
    short = estimate_memory(L8, replace(QLORA, stack="unsloth", seq_len=1024, recompute="none")).assumptions
    assert any(x.startswith("loss kernel fused (unsloth default for micro-batches of at most 1024 tokens)")
               for x in short)
    assert any(x.startswith("checkpoints not offloaded") for x in short)
    # use_gradient_checkpointing=True: every block checkpointed on the GPU (layer-1): 30-32 more bf16 block inputs
    # (the two peaks fall in different phases)
    on_gpu = estimate_memory(L8, replace(QLORA, stack="unsloth", recompute="layer-1"))
    off = estimate_memory(L8, replace(QLORA, stack="unsloth"))
    block = QLORA.seq_len * L8.hidden * 2
    assert (L8.n_layers - 2) * block <= on_gpu.activations - off.activations <= L8.n_layers * block
    assert not any(x.startswith("checkpoints offloaded") for x in on_gpu.assumptions)


def test_one_gpu_stack_in_searches_job_specs_and_flags(tmp_path, capsys):
    from gpuwise.estimate.goodput import JobGoodput
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    spec = tmp_path / "job.yaml"
    spec.write_text("name: ft\nmodel: llama-3.1-8b\ntraining:\n  tokens: 1.0e7\n  global_batch: 8\n"
                    "  seq_len: 32768\n  stack: unsloth\n  lora_rank: 32\n  lora_targets: all-linear\n"
                    "  quantize: nf4\n  recompute: full\n")
    base = from_jobspec(load_job(spec), gpus=["L4"]).base
    assert (base.stack, base.precision) == ("unsloth", "bf16-mixed")
    good = JobGoodput.for_config(L8, base)
    found = good.fewest_fitting(get_gpu("L4"), 8, 64)
    assert found is not None and found[0] == 1 and all(c.plan.gpus == 1 for c, _ in found[1])
    longer = JobGoodput.for_config(L8, replace(base, seq_len=131072))
    assert longer.fewest_fitting(get_gpu("T4"), 8, 64) is None        # 1 T4 is too small; more are refused
    assert longer.fewest_fitting(get_gpu("L40S"), 8, 64)[0] == 1
    assert not estimate_memory(L8, replace(base, plan=ParallelPlan(dp=2))).fits(get_gpu("H100"))
    assert main(["memory", "llama-3.1-8b", "--stack", "unsloth", "--gpus", "2", "--lora-rank", "8"]) == 2
    assert "unsloth trains on one GPU only" in capsys.readouterr().err
    assert main(["estimate", str(spec), "--gpu", "L4", "--gpus", "2"]) == 2
    assert "unsloth trains on one GPU only" in capsys.readouterr().err


def test_trace_refuses_what_it_does_not_run():
    pytest.importorskip("torch")
    from gpuwise.trace import trace_memory

    with pytest.raises(InputError, match="checkpoints offloaded to the host.*fused LoRA MLP"):
        trace_memory(L8, replace(QLORA, stack="unsloth", quantize=None, loss_kernel="eager"))


def test_unsloth_readme_rows_are_checked_with_the_stack():
    """External feasibility checks (Unsloth README @ 000252c9), the stack defined from code before scoring: every
    Unsloth row is checked; the estimate's longest contexts are all above the README's (it counts less memory per
    token than the README's line implies), so only the 8B 80 GB and both 70B rows stay under +25%."""
    from gpuwise.validation.memory_external import unsloth_rows

    rows = [r for r in unsloth_rows() if r.stack == "unsloth"]
    assert len(rows) == 9 and all(r.status == "checked" for r in rows)
    assert all(r.predicted > r.measured for r in rows)
    passed = sorted(r.source.split(" Instruct Unsloth ")[1] for r in rows if r.passed)
    assert [r.source.split("csv ")[1].split(" Instruct")[0] for r in rows if r.passed].count("Llama 3.3 (70B)") == 2
    assert passed == ["48 GB", "80 GB", "80 GB"]


def test_stacks_csv_short_loss_is_parsed_once_into_the_stack_record():
    """stacks.csv short_loss "fused:1024" is the typed record's (short_loss_kernel, short_loss_tokens); the stack's
    loss kernel switches at the threshold; a stack without one keeps its loss kernel at any length."""
    from gpuwise.workload.stacks import stack_row

    st = stack_row("unsloth")
    assert (st.short_loss_kernel, st.short_loss_tokens) == ("fused", 1024)
    assert (st.loss_kernel_for(1024), st.loss_kernel_for(1025)) == ("fused", st.loss_kernel) == ("fused", "cce")
    assert "loss kernel fused for micro-batches of at most 1024 tokens" in st.describe()
    plain = stack_row("pytorch")
    assert (plain.short_loss_kernel, plain.short_loss_tokens) == ("", 0)
    assert plain.loss_kernel_for(1) == plain.loss_kernel and "micro-batches of at most" not in plain.describe()
