"""One traced training step of one rank: build under FakeTensorMode, run a warm-up step (creates the
optimizer state), then count every tensor of a second step with PyTorch's memory trackers."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpuwise.estimate.gptq import gptq_format
from gpuwise.estimate.levers import reference_lora_dropout
from gpuwise.estimate.dora import dora_reruns_frozen
from gpuwise.estimate.stack_code import kbit_fp32_stream, peft_adapters
from gpuwise.nn import Adapters, Shard, build_model, set_compute_dtype, tp_shard_spec
from gpuwise.trace.optimizers import make_optimizer
from gpuwise.trace.precision import dtypes
from gpuwise.trace.recompute import apply_recompute
from gpuwise.trace import step
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig

CATEGORIES = ("param", "grad", "optimizer", "activation", "temporary", "other")
# tracker reference types -> our categories (MemTracker and FSDPMemTracker names)
_MAP = {"parameter": "param", "buffer": "param", "sharded param": "param", "unsharded param": "param",
        "gradient": "grad", "sharded grad": "grad", "unsharded grad": "grad", "optstate": "optimizer",
        "activation": "activation", "inputs": "activation", "temp": "temporary",
        "all gather": "other", "reduce scatter": "other", "other": "other"}


@dataclass(frozen=True)
class StageRun:
    """What one traced rank runs: its layers, whether it holds the embedding / output layer, and
    how many micro-batches it keeps in flight before their backwards (pipeline schedules)."""

    layers: int
    embed: bool = True
    head: bool = True
    in_flight: int = 1
    first_layer: int = 0


def _categorise(snap: dict) -> dict[str, int]:
    out = dict.fromkeys(CATEGORIES, 0)
    total = 0
    for dev_snap in snap.values():
        for k, v in dev_snap.items():
            key = str(getattr(k, "value", k)).lower()
            if key == "total":
                total += int(v)
            else:
                out[_MAP.get(key, "other")] += int(v)
    out["peak"] = total
    return out


def trace_stage(spec: ModelSpec, cfg: TrainingConfig, run: StageRun, *, foreach: bool = False) -> dict[str, int]:
    """Bytes by category at the peak of one warm training step of one rank."""
    return max(trace_phases(spec, cfg, run, foreach=foreach), key=lambda ph: ph[1]["peak"])[1]


def _restart_peak(tracker) -> None:
    """Start a new peak window at the current usage (the trackers keep one running maximum; we
    want one per phase of the step, so that each can be extrapolated over depth on its own)."""
    cur = tracker.get_tracker_snapshot("current")
    tracker._peak_mem = {dev: snap["Total"] for dev, snap in cur.items()}
    tracker._peak_mem_snap = cur


def trace_phases(spec: ModelSpec, cfg: TrainingConfig, run: StageRun, *,
                 foreach: bool = False) -> list[tuple[str, dict[str, int]]]:
    """(phase, bytes by category at that phase's peak) for each forward, each window of each
    backward (`_mark_block_backwards`) and the optimizer step of one warm training step of one
    rank, in order. Which phase peaks can change with depth (the loss's logits against the
    optimizer step's gradients), so depth extrapolation works phase by phase."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    ways = cfg.plan.fsdp_ways
    dt = dtypes(cfg.precision, ways > 1)
    mesh = None
    if ways > 1:
        from gpuwise.trace.fsdp import fake_mesh

        mesh = fake_mesh(ways)
    with FakeTensorMode():
        model, opts = _traced_rank(spec, cfg, run, dt, ways, mesh, foreach)
        batch = _batch_maker(spec, cfg, run, dt)
        tracker = None
        phases: list[tuple[str, dict[str, int]]] = []

        def mark(name: str) -> None:
            phases.append((name, _categorise(tracker.get_tracker_snapshot("peak"))))
            _restart_peak(tracker)

        _mark_block_backwards(model, lambda name: tracker is not None and mark(name))
        for prm in model.parameters():           # warm-up: an optimizer step creates its state
            if prm.requires_grad:
                prm.grad = torch.zeros_like(prm)
        for opt in opts:
            opt.step()
        step_in_backward(model, opts, cfg.optimizer_in_backward)
        import warnings

        with warnings.catch_warnings():          # the tracker notes the gradients the hooks freed (None): harmless
            warnings.filterwarnings("ignore", message="Expected a tensor or a traceable wrapper-subclass")
            tracker = _tracker(model, opts, ways > 1)
            with tracker:
                ops = schedule(run.in_flight, cfg.grad_accum)
                batches = (batch() for _ in range(ops.count("F")))      # each made as its forward starts
                step.train_step(model, opts, cfg, batches, ops=ops, head=run.head,
                                sync_last_only=ways > 1 and run.in_flight > 1,
                                on_forward=tracker.reset_mod_stats,   # module stats per forward; the peak is kept
                                mark=mark)
        return phases


def _traced_rank(spec: ModelSpec, cfg: TrainingConfig, run: StageRun, dt, ways: int, mesh, foreach: bool):
    """(model, optimizers) of one rank's stage, FSDP-sharded when the plan shards; call under FakeTensorMode."""
    p = cfg.plan
    model = build_rank_model(spec, cfg, dt, shard=Shard(p.tp, p.sp, p.cp), layers=run.layers, embed=run.embed,
                             head=run.head, first_layer=run.first_layer)
    if ways > 1:
        from gpuwise.trace.fsdp import shard as fsdp_shard

        fsdp_shard(model, mesh, dt.fsdp_param, reshard_after_forward=p.pp == 1)
    return model, optimizers(cfg, model, foreach)


def stream_dtype(cfg: TrainingConfig, dt) -> torch.dtype:
    """The residual stream's dtype between blocks: FSDP's gathered-parameter dtype, float32 under the QLoRA recipe's
    float32 rest, else the frozen base's (LoRA) or the parameters' dtype."""
    return dt.fsdp_param or (torch.float32 if kbit_fp32_stream(cfg) else dt.frozen if cfg.lora_rank > 0 else dt.param)


def _batch_maker(spec: ModelSpec, cfg: TrainingConfig, run: StageRun, dt):
    """A function giving one micro-batch (inputs, labels) as this stage sees it: token ids where the
    stage embeds, else the previous stage's activations (sequence-sharded under SP)."""
    p = cfg.plan
    shard = Shard(p.tp, p.sp, p.cp)
    local = tp_shard_spec(spec, p.tp)
    tokens = cfg.seq_len // p.cp
    stream = stream_dtype(cfg, dt)

    def batch():
        labels = torch.randint(0, local.vocab_size, (cfg.micro_batch, tokens))
        if run.embed:
            return torch.randint(0, local.vocab_size, (cfg.micro_batch, tokens)), labels
        local_tokens = tokens // shard.sp_ways
        return torch.randn(cfg.micro_batch, local_tokens, spec.hidden, dtype=stream, requires_grad=True), labels

    return batch


def adapters_for(cfg: TrainingConfig, dt, targets: frozenset) -> Adapters:
    """The LoRA layers of ``cfg`` in the dtypes `dt`: PEFT's float32 adapters where the stack's layers are PEFT's,
    the precision's adapter dtype otherwise; the dropout the traced layers run."""
    peft = peft_adapters(cfg)
    return Adapters(cfg.lora_rank, cfg.quantize == "nf4", dt.frozen, torch.float32 if peft else dt.adapter,
                    targets, peft, reference_lora_dropout(cfg), gptq_format(cfg.quantize), cfg.dora,
                    dora_reruns_frozen(cfg))


def build_rank_model(spec: ModelSpec, cfg: TrainingConfig, dt, *, shard: Shard | None = None,
                     layers: int | None = None, embed: bool = True, head: bool = True, first_layer: int = 0,
                     device=None) -> torch.nn.Module:
    """One rank's model as a training step runs it: stored in the dtypes `dt` of ``cfg.precision``
    (`precision.dtypes`), LoRA / QLoRA adapters with the frozen base as buffers, ``cfg.recompute`` by
    name, train mode. The trace (under FakeTensorMode) and `validation.gpu_measure` (on a real GPU) both
    build it here; `layers`/`embed`/`head`: a pipeline stage's part (default: the whole model)."""
    lora = cfg.lora_rank > 0
    from gpuwise.estimate.lora import lora_modules
    from gpuwise.estimate.stack_code import model_code

    adapters = adapters_for(cfg, dt, lora_modules(cfg.lora_targets)) if lora else None
    model = build_model(spec, dtype=dt.frozen if lora else dt.param, shard=shard, adapters=adapters,
                        attention="sdpa" if cfg.flash_attention else "eager", layers=layers, embed=embed,
                        head=head, device=device)
    set_compute_dtype(model, dt.compute)
    if kbit_fp32_stream(cfg):
        _kbit_fp32_rest(model)
    if lora:
        _frozen_to_buffers(model)
    apply_recompute(model, cfg.recompute, first_layer)
    from gpuwise.estimate.levers import resolve
    from gpuwise.workload.training import LOSS_CHUNKS

    kernel = resolve(cfg).loss_kernel
    if kernel == "chunked" and hasattr(model, "loss_chunks"):
        model.loss_chunks = LOSS_CHUNKS
        model.chunk_logits_held = model_code(cfg.stack).chunk_logits_held
        if model_code(cfg.stack).logits_fp32_held and hasattr(model, "logits_fp32_held"):
            model.logits_fp32_held = model_code(cfg.stack).loss_chunk_tokens or cfg.seq_len
    if kernel == "eager-nocast" and hasattr(model, "loss_upcast"):
        model.loss_upcast = False
    if cfg.padding_mask and hasattr(model, "padding_mask"):
        model.padding_mask = True
    model.train()
    return model


def _mark_block_backwards(model: torch.nn.Module, mark) -> None:
    """Split each backward into windows whose peak sits at the same moment at every depth, so that
    depth extrapolation stays exact: gradients grow and saved activations shrink as the blocks run
    their backwards, so the single peak of a whole backward moves from the loss boundary to its end
    as layers are added (gpt2-xl FSDP: 3.11 GiB extrapolated from 3-4 layers, 3.58 GiB traced at
    48). A window ends when the gradient of the output of the last and of the first block of each
    block list arrives (before that block runs its backward): the loss and output layer's backward;
    the blocks' backwards but the first one's (peak at one of its ends, next to the other windows);
    the first block's backward and the end of the backward (embedding, FSDP's root reduce-scatter)."""
    for mod in list(model.modules()):
        blocks = getattr(mod, "blocks", None)
        if not isinstance(blocks, torch.nn.ModuleList) or not len(blocks):
            continue
        ends = {len(blocks) - 1: "backward: loss and output layer", 0: "backward: blocks"}   # one block: the first

        for i, what in ends.items():
            def on_output(module, args, out, what=what):
                if isinstance(out, torch.Tensor) and out.requires_grad:
                    out.register_hook(lambda grad: mark(what) and None)
            blocks[i].register_forward_hook(on_output)


def schedule(in_flight: int, grad_accum: int) -> str:
    """Forwards (F) and backwards (B) traced for one step. Without a pipeline: min(grad_accum, 2)
    micro-steps (the second runs with the first one's gradients alive). A pipeline stage holding
    `in_flight` micro-batches: 1F1B's warm-up forwards, then, when the step has more micro-batches,
    one steady-state backward-forward pair (the new forward runs with `in_flight` micro-batches in
    flight and the first backward's gradients alive), then the drain."""
    if in_flight == 1:
        return "FB" * min(grad_accum, 2)
    steady = "BF" if grad_accum > in_flight else ""
    return "F" * in_flight + steady + "B" * in_flight


def _kbit_fp32_rest(model: torch.nn.Module) -> None:
    """Every frozen 16-bit parameter that is not a 4-bit weight -- embeddings, norms, the output layer, biases -- cast
    to float32, as prepare_model_for_kbit_training does before PEFT adds the adapters (which it leaves alone)."""
    from gpuwise.nn.linear import NF4Weight

    for mod in model.modules():
        if isinstance(mod, NF4Weight):
            continue
        for p in mod._parameters.values():
            if p is not None and not p.requires_grad and p.dtype in (torch.float16, torch.bfloat16):
                p.data = p.data.float()


def _frozen_to_buffers(model: torch.nn.Module) -> None:
    """Frozen weights (LoRA base) become buffers: they are stored, never updated, and the trackers
    hook only trainable parameters."""
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is not None and not p.requires_grad:
                del mod._parameters[name]
                mod.register_buffer(name, p.detach())


def optimizers(cfg: TrainingConfig, model: torch.nn.Module, foreach: bool) -> list:
    """One optimizer over the trainable parameters, or (optimizer in backward) one per parameter, as
    torchtune's optimizer_in_bwd builds them."""
    if not cfg.optimizer_in_backward:
        return [make_optimizer(cfg.optimizer, model.parameters(), foreach=foreach)]
    return [make_optimizer(cfg.optimizer, [p], foreach=foreach) for p in model.parameters() if p.requires_grad]


def step_in_backward(model: torch.nn.Module, opts: list, on: bool) -> list:
    """Optimizer in backward: each parameter is stepped, and its gradient freed, once accumulated. The
    hooks' handles: a hook is held by the parameter's autograd metadata, out of the cycle collector's
    sight, so the parameter -> hook -> optimizer -> parameter cycle lives until they are removed."""
    if not on:
        return []
    for opt in opts:                            # the warm-up's gradients: hooks free them from now on
        opt.zero_grad(set_to_none=True)
    by_param = {id(o.param_groups[0]["params"][0]): o for o in opts}
    return [prm.register_post_accumulate_grad_hook(lambda _p, opt=by_param[id(prm)]: _step_and_free(opt))
            for prm in model.parameters() if prm.requires_grad]


def _step_and_free(opt) -> None:
    opt.step()
    opt.zero_grad(set_to_none=True)


def _tracker(model, opts: list, fsdp: bool):
    if fsdp:
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        return FSDPMemTracker(model, opts[0])
    from torch.distributed._tools.mem_tracker import MemTracker

    t = MemTracker()
    t.track_external(model, *opts)
    return t
