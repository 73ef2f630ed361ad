"""The levers users pull (gpuwise.estimate.levers) and training stacks as data (gpuwise/data/stacks/stacks.csv):
each lever's memory effect against its own accounting, its step-time effect, its assumption line, the
flags and job-spec fields, and the refusals (exit 2, one line)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpuwise.cli.main import main
from gpuwise.errors import InputError
from gpuwise.estimate import activations as act
from gpuwise.estimate.lora import adapter_params
from gpuwise.estimate.memory import estimate_memory
from gpuwise.estimate.performance import job_performance
from gpuwise.hardware.gpus import get_gpu
from gpuwise.workload.models import load_model, param_counts
from gpuwise.workload.stacks import stack_row
from gpuwise.workload.training import STACKS, ParallelPlan, TrainingConfig

GIB = 2 ** 30
L8 = load_model("llama-3.1-8b")
L70 = load_model("llama-3.1-70b")
FSDP8 = ParallelPlan(dp=8, zero=3)


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_cpu_offload_keeps_only_the_unsharded_working_set_on_the_gpu():
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, recompute="full", plan=FSDP8)
    on, off = estimate_memory(L70, replace(cfg, cpu_offload=True)), estimate_memory(L70, cfg)
    assert on.parameters == on.gradients == on.optimizer == 0.0
    # the sharded fp32 states (16 B per parameter / 8) leave; the gathered blocks and the activations stay
    assert off.allocated - on.allocated >= 0.9 * 16 * off.params / 8
    assert on.allocated == on.activations + on.temporaries and on.temporaries > 0 and on.allocated < 20 * GIB
    assert any("FSDP CPU offload" in a and "host memory per GPU" in a for a in on.assumptions)
    # a search over layouts passes over one that cannot offload (not FSDP): it never fits
    no_fsdp = estimate_memory(L70, replace(cfg, cpu_offload=True, plan=ParallelPlan(dp=8, zero=1)))
    assert not no_fsdp.fits(get_gpu("H100")) and no_fsdp.peak_phase == "cannot run"


def test_fsdp1_cpu_offload_holds_every_gradient_shard_until_the_backward_ends():
    """FSDP1 (universal-llm-trainer: torch FullyShardedDataParallel in its own loop) keeps each unit's reduced
    gradient shard on the GPU (_saved_grad_shard) until the final callback; FSDP2 (pytorch) moves it to the host at
    once. Full recompute: the last block's backward, with every other block's shard written, is the FSDP1 peak,
    whatever the accumulation in a loop that syncs every micro-batch (no no_sync)."""
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, recompute="full", precision="bf16", cpu_offload=True,
                         grad_accum=4, plan=ParallelPlan(dp=2, zero=3))
    fsdp1, fsdp2 = estimate_memory(L8, replace(cfg, stack="universal-llm-trainer")), estimate_memory(L8, cfg)
    shards = (fsdp2.params - 2 * L8.vocab_size * L8.hidden) * 2 / 2       # every block's bf16 gradient, 2 ranks
    assert fsdp1.peak_phase == "last block backward" and fsdp1.gradients >= 0.95 * shards
    assert fsdp2.gradients == 0.0 and fsdp1.allocated - fsdp2.allocated >= 0.8 * shards
    assert any("every block's reduced gradient shard until the backward ends" in a for a in fsdp1.assumptions)


def test_fsdp1_cpu_offload_with_the_optimizer_in_backward_drops_each_shard_at_once():
    """FSDP1 with the optimizer in backward runs prepare_gradient_for_optim in each unit's post-backward
    (torch/distributed/fsdp/_runtime_utils.py _post_backward_use_sharded_grad_views), which deletes
    _saved_grad_shard there: no block's shard waits for the end of backward, and the note does not say so; nor
    under pipeline parallelism, where the estimate models FSDP as FSDP2."""
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, recompute="full", precision="bf16", cpu_offload=True,
                         plan=ParallelPlan(dp=2, zero=3), stack="universal-llm-trainer")
    held, in_bwd = estimate_memory(L8, cfg), estimate_memory(L8, replace(cfg, optimizer_in_backward=True))
    shards = (held.params - 2 * L8.vocab_size * L8.hidden) * 2 / 2       # every block's bf16 gradient, 2 ranks
    assert held.gradients >= 0.95 * shards and in_bwd.gradients <= 0.05 * shards
    assert held.allocated - in_bwd.allocated >= 0.8 * shards
    assert not any("every block's reduced gradient shard" in a for a in in_bwd.assumptions)
    # under pipeline parallelism FSDP is modelled as FSDP2 (the stage and its gradients unsharded until the last
    # micro-batch): no shard is held to the end of backward, and the note does not say so
    pp = estimate_memory(L8, replace(cfg, plan=ParallelPlan(dp=1, pp=2, zero=3)))
    assert pp.peak_phase != "last block backward"
    assert not any("every block's reduced gradient shard" in a for a in pp.assumptions)


def test_trainer_fsdp_accumulation_keeps_unsharded_gradients_on_the_gpu_also_under_cpu_offload():
    """The transformers Trainer (and ms-swift 1.x, which runs it) does every micro-batch but the last under
    accelerate's no_sync, which is FSDP1's no_sync(): every unit's unsharded gradient is alive until the syncing
    micro-batch, on the GPU under CPU offload too (FSDP1's post-backward hook returns before the reduce-scatter and
    the host copy). A loop that syncs every micro-batch (universal-llm-trainer, Composer/llm-foundry) and FSDP2
    (pytorch) accumulate sharded (model_code.csv fsdp_no_sync)."""
    full = 2 * param_counts(L8).total                  # every parameter's unsharded bf16 gradient
    for offload in (False, True):
        cfg = TrainingConfig(micro_batch=1, seq_len=2048, recompute="full", precision="bf16", cpu_offload=offload,
                             plan=ParallelPlan(dp=2, zero=3))

        def est(stack, accum, cfg=cfg):
            return estimate_memory(L8, replace(cfg, stack=stack, grad_accum=accum))
        for stack in ("hf-trainer", "ms-swift"):
            acc4, acc1, synced4 = est(stack, 4), est(stack, 1), est("universal-llm-trainer", 4)
            assert abs(acc4.gradients - full) < 1e6, (stack, offload)
            assert acc1.gradients <= full / 2 and synced4.gradients <= full / 2
            assert acc4.allocated - synced4.allocated >= 0.3 * full
            assert any("FSDP1 no_sync" in a for a in acc4.assumptions)
        for stack in ("universal-llm-trainer", "llm-foundry", "pytorch"):
            assert est(stack, 4).gradients <= full / 2, (stack, offload)
    # the Trainer's own precision (bf16 autocast over float32 masters): accelerate's FSDP1 MixedPrecision gathers
    # bf16 parameters, so no_sync accumulates bf16 gradients, not float32 ones
    mixed = estimate_memory(L8, TrainingConfig(micro_batch=1, seq_len=2048, recompute="full", stack="hf-trainer",
                                               grad_accum=4, plan=ParallelPlan(dp=8, zero=3)))
    assert mixed.peak_phase == "block backward" and abs(mixed.gradients - full) < 1e6


def test_fit_levers_under_cpu_offload_suggest_only_changes_that_run_and_save(capsys):
    """`memory MODEL --zero 3 --cpu-offload` on a model that misses small cards lists its levers instead of
    refusing its own optimizer-offload suggestion (exit 2 before); a lever that saves nothing is left out."""
    out = run_json(capsys, "memory", "llama-2-13b", "--gpus", "2", "--zero", "3", "--cpu-offload", "--json")
    levers = {lv["lever"]: lv["required_gib"] for lv in out["how_to_fit"]}
    assert "full activation recompute" in levers and not any("offload" in n or "8-bit" in n for n in levers)
    assert all(gib < out["required_gib"] for n, gib in levers.items() if not n.startswith("a larger GPU"))


def test_cpu_offload_costs_host_copies_and_a_cpu_optimizer_step():
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, recompute="full", plan=FSDP8)
    h100 = get_gpu("H100")
    on = job_performance(L70, replace(cfg, cpu_offload=True), h100).step
    off = job_performance(L70, cfg, h100).step
    assert on.step_time_s > off.step_time_s
    assert any("CPU Adam step" in a for a in on.assumptions)


def test_loss_kernels_keep_and_transient_bytes():
    st = act.ActivationSetting(micro_batch=1, seq_len=4096)
    v, tokens = L8.vocab_size, 4096
    assert act.loss_transient_bytes(L8, st, loss="eager") == tokens * v * 8
    assert act.loss_transient_bytes(L8, st, loss="chunked") == tokens * v * 8 / 8       # one of 8 chunks
    eager, fused_linear = act.head_bytes(L8, st, loss="eager"), act.head_bytes(L8, st, loss="fused-linear")
    assert eager - fused_linear == tokens * v * 4                                        # no float32 log-softmax
    assert act.head_bytes(L8, st, loss="fused") - fused_linear == tokens * v * 2         # 16-bit logits kept
    # a LoRA fine-tune peaks at the loss boundary: the kernels order the estimate
    cfg = TrainingConfig(micro_batch=4, seq_len=4096, lora_rank=16)
    got = {k: estimate_memory(L8, replace(cfg, loss_kernel=k)).allocated for k in ("eager", "chunked", "fused-linear")}
    assert got["eager"] > got["chunked"] > got["fused-linear"]


def test_eager_nocast_keeps_the_eager_tensors_in_the_logits_dtype(capsys):
    """Cross-entropy on 16-bit logits without the float32 upcast (pure bf16 loops such as universal-llm-trainer's
    nn.CrossEntropyLoss): the eager rule at the logits' bytes; refused under autocast, which runs it in float32."""
    st = act.ActivationSetting(micro_batch=1, seq_len=4096)
    v, tokens = L8.vocab_size, 4096
    assert act.loss_transient_bytes(L8, st, loss="eager-nocast") == tokens * v * 2 * 2
    assert act.head_bytes(L8, st, loss="eager") - act.head_bytes(L8, st, loss="eager-nocast") == tokens * v * (4 - 2)
    pure = TrainingConfig(micro_batch=2, seq_len=4096, precision="bf16", lora_rank=16)
    saved = estimate_memory(L8, pure).allocated - estimate_memory(L8, replace(pure, loss_kernel="eager-nocast")).allocated
    assert saved == pytest.approx(2 * 4096 * v * (12 - 6))          # 12 B -> 6 B per vocabulary entry and token
    assert main(["memory", "llama-3.1-8b", "--loss-kernel", "eager-nocast"]) == 2      # bf16-mixed: autocast
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "autocast" in err and "--loss-kernel eager" in err


def test_eager_nocast_trace_agrees_with_the_analytic_method():
    """A real PyTorch step under FakeTensor: the trace runs F.cross_entropy on the bf16 logits as they are."""
    from gpuwise.trace.memory import trace_memory

    spec = load_model("qwen2.5-0.5b")
    for kernel in ("eager", "eager-nocast"):
        cfg = TrainingConfig(micro_batch=2, seq_len=1024, precision="bf16", loss_kernel=kernel)
        traced, analytic = trace_memory(spec, cfg), estimate_memory(spec, cfg)
        assert traced.peak_allocated_bytes == pytest.approx(analytic.allocated, rel=0.01), kernel
    nocast = TrainingConfig(micro_batch=2, seq_len=1024, precision="bf16", loss_kernel="eager-nocast")
    eager = replace(nocast, loss_kernel="eager")
    # the trace sees the upcast's cost: 3 float32 vs 3 bf16 vocabulary-wide tensors at the loss boundary
    gap = trace_memory(spec, eager).peak_allocated_bytes - trace_memory(spec, nocast).peak_allocated_bytes
    assert gap == pytest.approx(2 * 1024 * spec.vocab_size * 6, rel=0.02)


def test_optimizer_in_backward_frees_the_gradient_set_and_refuses_accumulation(capsys):
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, recompute="full")
    on, off = estimate_memory(L8, replace(cfg, optimizer_in_backward=True)), estimate_memory(L8, cfg)
    assert on.gradients == 0.0 and off.gradients == pytest.approx(4 * off.params)
    assert off.allocated - on.allocated > 0.9 * 4 * off.params - 2 * GIB       # one block's gradients stay
    assert main(["memory", "llama-3.1-8b", "--optimizer-in-backward", "--grad-accum", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "optimizer-in-backward" in err and "--grad-accum 1" in err


def test_activation_offload_keeps_two_blocks_and_times_the_copies():
    cfg = TrainingConfig(micro_batch=2, seq_len=4096, lora_rank=16, loss_kernel="fused-linear")
    on, off = estimate_memory(L8, replace(cfg, activation_offload=True)), estimate_memory(L8, cfg)
    st = act.ActivationSetting(micro_batch=2, seq_len=4096, frozen_base=True, adapted=frozenset({"q", "v"}))
    assert off.activations - on.activations == pytest.approx((L8.n_layers - 2) * act.layer_bytes(L8, st), rel=1e-9)
    slow = job_performance(L8, replace(cfg, activation_offload=True), get_gpu("A10G")).step
    assert any("offload step time" in a for a in slow.assumptions)


def test_phi3_fused_qkv_and_gate_up_carry_one_adapter_each():
    # Hugging Face's Phi-3: qkv_proj (3072 -> 3 x 3072) and gate_up_proj (3072 -> 2 x 8192) are single matrices
    phi3 = load_model("phi-3-mini-4k-instruct")
    h, f = 3072, 8192
    assert adapter_params(phi3, 8, "all-linear") == 32 * 8 * ((h + 3 * h) + (h + h) + (h + 2 * f) + (f + h))
    assert adapter_params(phi3, 8, "q,v") == adapter_params(phi3, 8, "k") == 32 * 8 * (h + 3 * h)
    assert adapter_params(phi3, 8, "up") == adapter_params(phi3, 8, "gate,up") == 32 * 8 * (h + 2 * f)
    llama_like = replace(phi3, family="llama")          # the same weights unfused: one adapter per matrix
    assert adapter_params(llama_like, 8, "gate,up") == 32 * 8 * 2 * (h + f)


def test_lora_targets_default_is_todays_and_all_linear_counts_every_linear():
    assert adapter_params(L8, 16) == adapter_params(L8, 16, "q,v") == 32 * 16 * ((4096 + 4096) + (4096 + 1024))
    per_layer = (4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 3 * (4096 + 14336)
    assert adapter_params(L8, 16, "all-linear") == 32 * 16 * per_layer == 41_943_040
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, lora_rank=16)
    qv, every = estimate_memory(L8, cfg), estimate_memory(L8, replace(cfg, lora_targets="all-linear"))
    assert every.trainable_params == 41_943_040 and every.activations > qv.activations   # MLP inputs kept
    with pytest.raises(InputError, match="lora-targets"):
        estimate_memory(L8, replace(cfg, lora_targets="q,mlp"))


def test_eight_bit_and_paged_optimizers():
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, recompute="full")
    eight = estimate_memory(L8, replace(cfg, optimizer="adamw8bit"))
    assert eight.optimizer == pytest.approx(eight.params * 2 * (1 + 8 / 2048))          # 2 moments of ~1 B
    assert eight.optimizer == estimate_memory(L8, replace(cfg, optimizer="adamw-8bit")).optimizer
    paged = estimate_memory(L8, replace(cfg, optimizer="paged_adamw8bit"))
    assert paged.optimizer == 0.0 and any("unified memory" in a for a in paged.assumptions)


def test_universal_llm_trainer_defaults_to_its_own_dtype_loss_as_its_rows_are_modelled(capsys):
    """universal-llm-trainer's loop calls nn.CrossEntropyLoss on the logits as the model returns them (no labels to
    the model, no autocast): its default loss keeps no float32 upcast of 16-bit logits (2 + 4 B per vocabulary
    entry and token at the loss boundary, not eager's 4 + 8), takes float32 logits (QLoRA's float32 output layer)
    as they are, and becomes eager under autocast, where cross_entropy runs in float32."""
    cfg = TrainingConfig(micro_batch=2, seq_len=8192, precision="bf16", stack="universal-llm-trainer", lora_rank=8,
                         lora_targets="all-linear", recompute="full")
    own, eager = estimate_memory(L8, cfg), estimate_memory(L8, replace(cfg, loss_kernel="eager"))
    assert own.peak_phase == eager.peak_phase == "loss boundary"
    assert eager.allocated - own.allocated == pytest.approx(2 * 8192 * L8.vocab_size * 6, rel=1e-9)
    q = replace(cfg, quantize="nf4")                   # float32 logits: nothing to upcast, eager's bytes
    assert estimate_memory(L8, q).allocated == estimate_memory(L8, replace(q, loss_kernel="eager")).allocated
    mixed = replace(cfg, precision="bf16-mixed")
    assert estimate_memory(L8, mixed).allocated == estimate_memory(L8, replace(mixed, loss_kernel="eager")).allocated
    assert main(["memory", "llama-3.1-8b", "--stack", "universal-llm-trainer", "--precision", "bf16-mixed",
                 "--batch-size", "1", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["assumptions"]
    assert any(a.startswith("loss kernel eager (universal-llm-trainer default eager-nocast; autocast") for a in notes)


def test_every_stack_is_a_row_with_a_source_and_is_stated(capsys):
    assert STACKS[0] == "pytorch" and set(STACKS) >= {"torchtitan", "megatron", "deepspeed", "hf-trainer",
                                                      "llm-foundry", "torchtune", "litgpt"}
    for s in STACKS:
        assert len(stack_row(s).source) > 40
    out = run_json(capsys, "memory", "llama-3.1-8b", "--stack", "torchtune", "--json")
    assert out["config"]["precision"] == "bf16" and out["config"]["stack"] == "torchtune"   # the stack's default
    assert any(a.startswith("stack torchtune") for a in out["assumptions"])
    assert any(a.startswith("loss kernel chunked (torchtune default)") for a in out["assumptions"])
    mixed = run_json(capsys, "memory", "llama-3.1-8b", "--stack", "torchtune", "--precision", "bf16-mixed", "--json")
    assert mixed["config"]["precision"] == "bf16-mixed" and mixed["allocated_gib"] > out["allocated_gib"]


def test_estimate_states_the_stack_and_its_levers(capsys):
    out = run_json(capsys, "estimate", "--model", "llama-3.1-8b", "--gpu", "H100", "--gpus", "8", "--zero", "3",
                   "--batch-size", "2", "--stack", "torchtune", "--json")
    assert out["stack"] == "torchtune" and out["precision"] == "bf16"
    assert any(a.startswith("stack torchtune") for a in out["assumptions"])
    assert any(a.startswith("loss kernel chunked (torchtune default)") for a in out["assumptions"])
    assert any("no torchtune row is fitted: the pytorch row stands in" in a for a in out["assumptions"])


def test_stack_defaults_change_what_is_allocated():
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, recompute="full")
    hf = estimate_memory(L8, replace(cfg, stack="hf-trainer"))       # foreach AdamW: sqrt(v) for every parameter
    pt = estimate_memory(L8, cfg)
    assert hf.temporaries - pt.temporaries == pytest.approx(4 * pt.params) and hf.peak_phase == "optimizer step"
    mg = estimate_memory(L8, replace(cfg, stack="megatron"))         # 2 B weights, fp32 main_grad, 12 B optimizer
    assert mg.optimizer == pytest.approx(12 * mg.params) and mg.parameters == pytest.approx(2 * mg.params)


def test_unfitted_stack_falls_back_to_a_stated_efficiency_row():
    from gpuwise.estimate.roofline_step import op_efficiency_for

    h100 = get_gpu("H100")
    lit, pt = op_efficiency_for(h100, "litgpt"), op_efficiency_for(h100, "pytorch")
    assert lit.gemm == pt.gemm and "no litgpt row is fitted: the pytorch row stands in" in lit.describe()
    assert op_efficiency_for(h100, "megatron").gemm != pt.gemm


def test_levers_flow_through_job_specs_and_copies(tmp_path):
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    spec = tmp_path / "job.yaml"
    spec.write_text("name: ft\nmodel: llama-3.1-8b\ntraining:\n  tokens: 1.0e8\n  global_batch: 8\n"
                    "  seq_len: 2048\n  stack: torchtune\n  lora_rank: 16\n  lora_targets: all-linear\n"
                    "  loss_kernel: fused-linear\n  activation_offload: true\n")
    base = from_jobspec(load_job(spec), gpus=["A100-80GB"]).base
    assert (base.precision, base.lora_targets, base.loss_kernel, base.activation_offload) == \
        ("bf16", "all-linear", "fused-linear", True)
    copy = TrainingConfig(**{**base.__dict__, "micro_batch": 2})     # the planner's copies keep every lever
    assert copy.lora_targets == "all-linear" and copy.activation_offload
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.read_text().replace("fused-linear", "fast"))
    with pytest.raises(InputError, match="loss_kernel"):
        load_job(bad)


def test_trace_refuses_levers_it_does_not_run():
    pytest.importorskip("torch")
    from gpuwise.trace import trace_memory

    with pytest.raises(InputError, match="does not model --cpu-offload.*--method analytic"):
        trace_memory(L8, TrainingConfig(plan=FSDP8, cpu_offload=True))
    with pytest.raises(InputError, match="--optimizer-in-backward with FSDP"):
        trace_memory(L8, TrainingConfig(plan=FSDP8, optimizer_in_backward=True))


def test_lever_flags_refused_where_they_cannot_run(capsys):
    assert main(["memory", "llama-3.1-70b", "--gpus", "8", "--cpu-offload"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--zero 3" in err
    assert main(["memory", "llama-3.1-8b", "--loss-kernel", "fast"]) == 2
    assert "loss-kernel" in capsys.readouterr().err


def test_compile_keeps_fewer_mlp_activations_and_fuses_memory_bound_time():
    st = act.ActivationSetting(micro_batch=1, seq_len=2048)
    eager, comp = act.mlp_bytes_per_token(L8, st), act.mlp_bytes_per_token(L8, replace(st, compiled=True))
    assert eager[1] - comp[1] == 2 * L8.ffn_hidden * 2          # act(gate) and the product are recomputed
    gpt2 = load_model("gpt2-xl")                                # a GeLU MLP keeps what eager keeps (H200 runs)
    assert act.mlp_bytes_per_token(gpt2, replace(st, compiled=True)) == act.mlp_bytes_per_token(gpt2, st)
    cfg = TrainingConfig(micro_batch=2, seq_len=4096, plan=FSDP8)
    h100 = get_gpu("H100")
    on, off = job_performance(L8, replace(cfg, compile=True), h100), job_performance(L8, cfg, h100)
    assert on.memory.activations < off.memory.activations and on.step.step_time_s < off.step.step_time_s
    assert any(a.startswith("step time: torch.compile") for a in on.step.assumptions)
    assert any(a.startswith("torch.compile") for a in on.memory.assumptions)


def test_float8_and_te_fp8_run_gemms_at_the_fp8_peak_only_where_the_gpu_has_one():
    cfg = TrainingConfig(micro_batch=1, seq_len=8192, recompute="full", plan=ParallelPlan(dp=8, tp=8, sp=True, zero=3))
    h100, a100 = get_gpu("H100"), get_gpu("A100-80GB")
    base = job_performance(L70, cfg, h100)
    f8 = job_performance(L70, replace(cfg, float8=True), h100)
    te = job_performance(L70, replace(cfg, precision="fp8"), h100)
    assert f8.step.step_time_s < base.step.step_time_s and te.step.step_time_s < base.step.step_time_s
    assert f8.memory.temporaries < base.memory.temporaries                 # blocks gathered in fp8
    # TE fp8 caches the fp8 weight and its transpose: 2 B per parameter more than bf16-mixed
    te_mem, bf = te.memory, base.memory
    assert te_mem.parameters - bf.parameters == pytest.approx(2 * bf.parameters / 4, rel=1e-6)
    # the A100 has no fp8 tensor cores: same GEMM time (the casts are not charged either)
    assert job_performance(L70, replace(cfg, float8=True), a100).step.step_time_s == pytest.approx(
        job_performance(L70, cfg, a100).step.step_time_s, rel=1e-9)


def test_async_tp_hides_tensor_parallel_collectives():
    cfg = TrainingConfig(micro_batch=1, seq_len=8192, recompute="full", plan=ParallelPlan(dp=8, tp=8, sp=True, zero=3))
    h100 = get_gpu("H100")
    on, off = job_performance(L70, replace(cfg, async_tp=True), h100).step, job_performance(L70, cfg, h100).step
    assert on.comm_s < off.comm_s and on.compute_s == pytest.approx(off.compute_s)
    assert any("AsyncTP" in a for a in on.assumptions)


def test_step_time_bound_stays_below_the_step_under_kernel_levers():
    from gpuwise.estimate.step_time import analytical_step_time, step_time_lower_bound

    h100 = get_gpu("H100")
    for kw in ({"compile": True}, {"float8": True}, {"precision": "fp8"}, {"cpu_offload": True}):
        cfg = TrainingConfig(micro_batch=2, seq_len=4096, plan=FSDP8, **kw)
        assert step_time_lower_bound(L8, cfg, h100) <= analytical_step_time(L8, cfg, h100).step_time_s


def test_trace_runs_lora_targets_and_chunked_loss_and_agrees_with_the_analytic_model():
    pytest.importorskip("torch")
    from gpuwise.trace import trace_memory

    spec = load_model("mpt-125m")            # fused QKV matrix + plain MLP + tied output layer
    cfg = TrainingConfig(micro_batch=2, seq_len=512, lora_rank=8, lora_targets="all-linear", loss_kernel="chunked")
    traced = trace_memory(spec, cfg).peak_allocated_bytes
    assert estimate_memory(spec, cfg, context=False).allocated == pytest.approx(traced, rel=0.01)
    # each lever moves the estimate by more than the agreement tolerance
    for other in ({"lora_targets": "q,v"}, {"loss_kernel": "eager"}):
        assert abs(estimate_memory(spec, replace(cfg, **other), context=False).allocated / traced - 1) > 0.02


def test_trace_runs_optimizer_in_backward_and_agrees_with_the_analytic_model():
    pytest.importorskip("torch")
    from gpuwise.trace import trace_memory

    spec = load_model("mpt-125m")            # a short sequence: the model states make the peak
    cfg = TrainingConfig(micro_batch=1, seq_len=64, optimizer_in_backward=True)
    traced = trace_memory(spec, cfg).peak_allocated_bytes
    assert estimate_memory(spec, cfg, context=False).allocated == pytest.approx(traced, rel=0.01)
    assert estimate_memory(spec, replace(cfg, optimizer_in_backward=False), context=False).allocated > 1.1 * traced


def test_cpu_offload_without_zero3_in_a_spec_names_the_lever():
    """A review found `estimate` blaming memory for a spec with cpu_offload and ZeRO 1/2 only."""
    import pytest

    from gpuwise.errors import InputError
    from gpuwise.workload.jobspec import parse_job

    data = {"name": "o", "model": "gpt2", "training": {"tokens": 1e6, "seq_len": 512, "global_batch": 8,
                                                      "cpu_offload": True}, "parallelism": {"zero": [1, 2]}}
    with pytest.raises(InputError) as e:
        parse_job(data)
    assert e.value.field == "training.cpu_offload" and "ZeRO 3" in str(e.value) and "\n" not in str(e.value)
    assert parse_job({**data, "parallelism": {"zero": [3]}}).training.cpu_offload


def test_optimizer_impl_lever_adds_the_foreach_temporary_and_says_so(capsys):
    """foreach AdamW (plain torch.optim.AdamW on CUDA) allocates sqrt(v) for every parameter in the step: 4 B each
    over the fused kernel (gemma-2b on an H200: 46.7 GiB foreach, 41.4 fused, measured)."""
    spec = load_model("gemma-2b")
    cfg = TrainingConfig(micro_batch=2, seq_len=2048, recompute="full")
    fused = estimate_memory(spec, replace(cfg, optimizer_impl="fused"))
    foreach = estimate_memory(spec, replace(cfg, optimizer_impl="foreach"))
    # the step's peak: 4 B weights + 4 B gradients + 8 B moments + the 4 B temporary per parameter
    assert foreach.peak_phase == "optimizer step" and fused.peak_phase != "optimizer step"
    assert foreach.allocated == pytest.approx(20 * fused.trainable_params, rel=0.01) and foreach.allocated > fused.allocated
    assert estimate_memory(spec, cfg).allocated == fused.allocated          # the pytorch stack's default: fused
    assert any(a.startswith("optimizer implementation foreach (--optimizer-impl)") for a in foreach.assumptions)
    assert any(a.startswith("optimizer implementation fused (--optimizer-impl)") for a in
               estimate_memory(spec, replace(cfg, stack="hf-trainer", optimizer_impl="fused")).assumptions)
    with pytest.raises(InputError, match="optimizer-impl"):
        estimate_memory(spec, replace(cfg, optimizer_impl="bogus"))
    assert main(["memory", "gemma-2b", "--batch-size", "2", "--recompute", "full", "--optimizer-impl", "foreach",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["allocated_gib"] == pytest.approx(foreach.allocated / 2 ** 30, rel=1e-3)


def test_optimizer_impl_notes_match_the_numbers_and_explicit_models_refuse_it(capsys):
    """Review fixes: foreach adds the sqrt(v) temporary to Adam(W) only, and says so only there; an explicit
    model (no modelled optimizer kernel) refuses the lever instead of ignoring it."""
    spec = load_model("llama-3.2-1b")
    sgd = TrainingConfig(micro_batch=1, seq_len=1024, optimizer="sgd")
    fused, foreach = (estimate_memory(spec, replace(sgd, optimizer_impl=i)) for i in ("fused", "foreach"))
    assert foreach.allocated == fused.allocated
    assert not any("sqrt(v)" in a for a in foreach.assumptions)
    assert main(["estimate", "--gpu", "H100", "--gpus", "1", "--model", "resnet50", "--batch-size", "64",
                 "--optimizer-impl", "foreach"]) == 2
    assert "optimizer-impl" in capsys.readouterr().err


def test_trace_reports_the_lora_targets_it_traced(capsys):
    """`--method trace` traced all-linear adapters but reported q,v's trainable count (its own default): both
    methods now report the targets asked for."""
    got = {}
    for method in ("analytic", "trace"):
        assert main(["memory", "llama-3.2-1b", "--lora-rank", "16", "--lora-targets", "all-linear",
                     "--method", method, "--json"]) == 0
        got[method] = json.loads(capsys.readouterr().out)["trainable_params"]
    assert got["trace"] == got["analytic"] == adapter_params(load_model("llama-3.2-1b"), 16, "all-linear")


def test_lora_targets_default_to_the_stacks_own_and_a_named_list_wins(capsys, tmp_path):
    """torchtune's LoRA configs adapt q, v, output_proj and the MLP and Unsloth's get_peft_model all seven
    linears (stacks.csv lora_targets): with no targets named, `memory` and a job spec use the stack's; named
    targets override it; the stack line states the default."""
    from gpuwise.workload.jobspec import parse_job

    def targets(*extra):
        out = run_json(capsys, "memory", "llama-3.1-8b", "--lora-rank", "16", *extra, "--json")
        return out["config"]["lora_targets"], out["trainable_params"]

    assert targets()[0] == "q,v"
    tune, unsloth = targets("--stack", "torchtune"), targets("--stack", "unsloth")
    assert tune[0] == "q,v,o,gate,up,down" and unsloth[0] == "q,k,v,o,gate,up,down" and unsloth[1] > tune[1]
    assert targets("--stack", "torchtune", "--lora-targets", "q,v") == targets()
    spec = parse_job({"name": "t", "model": "llama-3.1-8b", "training": {"tokens": 1e8, "global_batch": 8,
                                                                         "lora_rank": 16, "stack": "torchtune"}})
    assert spec.training.config_fields()["lora_targets"] == "q,v,o,gate,up,down"
    assert "LoRA targets q,v,o,gate,up,down when none are named" in stack_row("torchtune").describe()
