"""The caching-allocator simulation of `memory --method trace` on one GPU: the allocator's rules as
c10/cuda/CUDACachingAllocator.cpp states them (gpuwise.trace.allocator), the length distributions and the exact
size interpolation (gpuwise.trace.reserved), a replay of a tiny model's recorded run, and the CLI's keys and
refusals. Consistency checks of the code against PyTorch's stated rules and against itself, not accuracy
measurements (those are the GPU rows in gpuwise/data/measured/gpu)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpuwise.errors import InputError
from gpuwise.trace.allocator import MIB, CachingAllocator, round_size
from gpuwise.trace.reserved import LengthDist, _coefficients, _size, parse_lengths

torch = pytest.importorskip("torch")


def _alloc(*requests) -> CachingAllocator:
    a = CachingAllocator()
    for handle, nbytes in requests:
        a.malloc(handle, nbytes)
    return a


# --- the allocator's rules -------------------------------------------------------------------------------

def test_requests_round_up_to_512_bytes():
    assert (round_size(1), round_size(512), round_size(513), round_size(MIB + 1)) == (512, 512, 1024, MIB + 512)
    a = _alloc(("x", 1))
    assert a.allocated == 512


def test_small_requests_share_a_2_mib_segment_and_split_down_to_512_bytes():
    a = _alloc(("a", MIB))
    assert (a.segments, a.reserved, a.allocated) == (1, 2 * MIB, MIB)
    a.malloc("b", MIB - 512)               # leaves exactly 512 B: small blocks split at >= 512 B
    assert (a.segments, a.allocated) == (1, 2 * MIB - 512)
    a.malloc("c", 100)                     # served by that 512 B remainder
    assert (a.segments, a.reserved, a.allocated) == (1, 2 * MIB, 2 * MIB)
    a.malloc("d", 1)
    assert (a.segments, a.reserved) == (2, 4 * MIB)


def test_mid_size_requests_get_a_20_mib_segment_split_four_ways():
    a = _alloc(*[(i, 5 * MIB) for i in range(4)])
    assert (a.segments, a.reserved, a.allocated) == (1, 20 * MIB, 20 * MIB)
    a.malloc(4, 5 * MIB)
    assert (a.segments, a.reserved) == (2, 40 * MIB)


def test_large_requests_get_a_segment_rounded_to_2_mib():
    a = _alloc(("x", 100 * MIB + 1))
    assert (a.segments, a.reserved, a.allocated) == (1, 102 * MIB, 100 * MIB + 512)


def test_a_large_block_is_split_only_when_more_than_1_mib_would_remain():
    a = _alloc(("a", 5 * MIB), ("b", 14 * MIB))        # 15 MiB free block, 1 MiB would remain: not split
    assert (a.segments, a.allocated) == (1, 20 * MIB)
    a = _alloc(("a", 5 * MIB), ("b", 14 * MIB - 512))  # 1 MiB + 512 B would remain: split
    assert (a.segments, a.allocated) == (1, 19 * MIB - 512)
    a = _alloc(("x", 19 * MIB + 512))                  # its own 20 MiB segment, 0.5 MiB left with it
    assert (a.reserved, a.allocated) == (20 * MIB, 20 * MIB)


def test_freed_neighbours_merge_and_only_neighbours():
    a = _alloc(*[(i, 5 * MIB) for i in range(4)])
    a.free(0)
    a.free(2)                              # not adjacent: two 5 MiB holes
    a.malloc("ten", 10 * MIB)
    assert a.segments == 2
    b = _alloc(*[(i, 5 * MIB) for i in range(4)])
    b.free(1)
    b.free(2)                              # adjacent: one 10 MiB block
    b.malloc("ten", 10 * MIB)
    assert (b.segments, b.reserved, b.allocated) == (1, 20 * MIB, 20 * MIB)


def test_blocks_of_different_segments_never_merge():
    a = _alloc(("a", 50 * MIB), ("b", 50 * MIB))
    assert (a.segments, a.reserved) == (2, 100 * MIB)
    a.free("a")
    a.free("b")
    a.malloc("c", 100 * MIB)               # 100 MiB free, in two segments: a third one
    assert (a.segments, a.reserved, a.peak_reserved) == (3, 200 * MIB, 200 * MIB)


def test_best_fit_takes_the_smallest_free_block_that_fits():
    a = _alloc(("30", 30 * MIB), ("12", 12 * MIB), ("20", 20 * MIB))
    for h in ("30", "12", "20"):
        a.free(h)
    a.malloc("x", 11 * MIB)                # the 12 MiB block (first fit would take the 30 MiB one)
    assert a.allocated == 12 * MIB         # 1 MiB left: not split
    a.malloc("y", 30 * MIB)
    a.malloc("z", 20 * MIB)
    assert (a.segments, a.reserved) == (3, 62 * MIB)


def test_equal_free_blocks_go_to_the_older_segment_first():
    a = _alloc(*[(f"{seg}{k}", n) for seg in "AB" for k, n in enumerate((5 * MIB, 5 * MIB, 10 * MIB))])
    a.free("A1")
    a.free("B1")                           # two 5 MiB holes, one per segment, between live blocks
    a.malloc("m", 5 * MIB)                 # the lower address: segment A's
    a.free("B0")
    a.free("B2")                           # segment B is whole again only if its hole was left free
    a.malloc("whole", 20 * MIB)
    assert a.segments == 2


def test_pools_do_not_lend_blocks_to_each_other():
    a = _alloc(("big", 5 * MIB))
    a.free("big")                          # 20 MiB free in the large pool
    a.malloc("tiny", 1000)
    assert (a.segments, a.reserved) == (2, 22 * MIB)
    b = _alloc(("s", MIB))
    b.free("s")                            # 2 MiB free in the small pool
    b.malloc("l", MIB + 512)
    assert (b.segments, b.reserved) == (2, 22 * MIB)


def test_reserved_never_shrinks_and_reset_peak_restarts_at_the_current_values():
    a = _alloc(("a", 50 * MIB), ("b", 3 * MIB), ("c", 1000))
    for h in ("a", "b", "c"):
        a.free(h)
    st = a.stats()
    assert (st.allocated, st.reserved, st.peak_allocated, st.peak_reserved) == (
        0, 50 * MIB + 20 * MIB + 2 * MIB, 50 * MIB + 3 * MIB + 1024, 72 * MIB)
    a.malloc("d", 10 * MIB)
    a.reset_peak()
    st = a.stats()
    assert (st.peak_allocated, st.peak_reserved) == (st.allocated, st.reserved) == (10 * MIB, 72 * MIB)


def test_a_zero_byte_storage_takes_no_block():
    """PyTorch's allocate(0) returns a null pointer without calling malloc: no block, no segment."""
    a = _alloc(("z", 0))
    assert (a.segments, a.reserved, a.allocated) == (0, 0, 0) and a.has("z")
    a.free("z")
    assert not a.has("z") and a.allocated == 0


def test_growing_sizes_ratchet_the_reserve_and_shrinking_sizes_do_not():
    sizes = [(12 + 2 * i) * MIB for i in range(10)]            # 12 .. 30 MiB, each freed before the next
    up, down = CachingAllocator(), CachingAllocator()
    for seq, a in ((sizes, up), (sizes[::-1], down)):
        for i, n in enumerate(seq):
            a.malloc(i, n)
            a.free(i)
    assert up.reserved == sum(sizes) and up.segments == len(sizes)
    assert down.reserved == sizes[-1] and down.segments == 1


# --- lengths and interpolation ---------------------------------------------------------------------------

def test_coefficients_reproduce_a_quadratic_exactly_at_a_fourth_point():
    def f(x):
        return 3 * x * x + 4096 * x + 12_345
    xs = (64, 128, 256)
    coef = _coefficients(tuple(f(x) for x in xs), xs)
    assert [_size(coef, x) for x in (8, 100, 200, 4096)] == [f(x) for x in (8, 100, 200, 4096)]
    assert _coefficients((512, 512, 512), xs) == (512.0,) and _size((512.0,), 7) == 512
    lin = _coefficients((1024, 2048, 4096), xs)                # bytes proportional to the length
    assert _size(lin, 96) == 1536


def test_parse_lengths_accepts_the_four_forms():
    assert parse_lengths("fixed", 256) == LengthDist("fixed", 256)
    assert parse_lengths("uniform:8", 256) == LengthDist("uniform", 256, min_len=8)
    assert parse_lengths("lognormal:100:50", 256) == LengthDist("lognormal", 256, mean=100, sd=50, clip=True)
    assert parse_lengths("lognormal:100:50:drop", 256).clip is False
    assert parse_lengths("lognormal:300:0", 256).sampler(0)() == 256          # clipped: every draw is 256


def test_drop_with_no_length_within_the_longest_is_refused_not_sampled_forever():
    """lognormal:300:0:drop at --seq-len 256 drew 300 forever (every draw dropped): the sampler never returned."""
    with pytest.raises(InputError, match="drop needs"):
        parse_lengths("lognormal:300:0:drop", 256)
    dist = LengthDist("lognormal", 128, mean=100, sd=80)
    draw = dist.sampler(1)
    over = sum(draw() == 128 for _ in range(4000)) / 4000                     # clipped draws: those over 128
    assert over == pytest.approx(1 - dist.kept(), abs=0.03)


@pytest.mark.parametrize("text", ["uniform:0", "uniform:300", "lognormal:-1:2", "lognormal:100", "weird",
                                  "uniform:x", "fixed:3", "lognormal:300:0:drop", "lognormal:2000:100:drop"])
def test_parse_lengths_refuses_junk_naming_the_field(text):
    with pytest.raises(InputError) as err:
        parse_lengths(text, 256)
    assert err.value.field == "lengths"


def test_samplers_respect_the_longest_length():
    n = 3000
    fixed = LengthDist("fixed", 128).sampler(0)
    assert {fixed() for _ in range(50)} == {128}
    uni = LengthDist("uniform", 128, min_len=8).sampler(0)
    got = [uni() for _ in range(n)]
    assert min(got) == 8 and max(got) == 128
    clip = LengthDist("lognormal", 128, mean=100, sd=80, clip=True).sampler(0)
    drop = LengthDist("lognormal", 128, mean=100, sd=80, clip=False).sampler(0)
    clipped, dropped = [clip() for _ in range(n)], [drop() for _ in range(n)]
    assert max(clipped) == 128 and clipped.count(128) > n // 10      # P(len > 128) is about a quarter here
    assert max(dropped) <= 128 and dropped.count(128) < n // 100
    again = LengthDist("lognormal", 128, mean=100, sd=80, clip=True).sampler(0)
    assert [again() for _ in range(n)] == clipped                    # seeded


# --- a recorded run of a tiny model ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_run():
    """One block, eager attention, activations of MiBs (large-pool blocks whose sizes follow the length)."""
    from gpuwise.workload.models import load_model
    from gpuwise.workload.training import TrainingConfig

    spec = replace(load_model("llama-3.1-8b"), name="tiny-llama", n_layers=1, hidden=128, n_heads=4, n_kv_heads=2,
                   head_dim=32, ffn_hidden=256, vocab_size=512, max_seq_len=1024)
    cfg = TrainingConfig(micro_batch=8, seq_len=256, grad_accum=2, precision="fp32", flash_attention=False)
    return spec, cfg


def _raw_replay(rec) -> CachingAllocator:
    a = CachingAllocator()
    for step in [rec.build, *[e for st in rec.steps for e in st]]:
        for kind, i, n in step:
            if kind > 0:
                a.malloc(i, n)
            elif a.has(i):
                a.free(i)
    return a


def test_recorded_sizes_interpolate_exactly_and_templates_replay_the_recording(tiny_run):
    from gpuwise.trace import reserved as R
    from gpuwise.trace.allocations import record_run

    spec, cfg = tiny_run
    xs = R.record_lengths(cfg.seq_len, True)
    recs = [record_run(spec, cfg, x) for x in xs]
    merged = R._merge([R._templates(r) for r in recs], list(xs))
    fourth = 96
    assert fourth not in xs
    other = R._templates(record_run(spec, cfg, fourth))
    pairs = [(p, q) for a, b in zip(merged, other) for ga, gb in zip(a, b) for p, q in zip(ga, gb) if p[0] > 0]
    assert sum(len(set(p[2])) > 1 for p, _ in pairs) > 100                   # sizes that follow the length
    assert all(_size(_coefficients(p[2], xs), fourth) == q[2] for p, q in pairs)
    # the templates, replayed at the recorded length, allocate and free what the recording did
    tpl = R._merge([R._templates(recs[-1])], [xs[-1]])
    tpl = [[[(op[0], op[1], (float(op[2][0]),)) if op[0] > 0 else op for op in seg] for seg in st] for st in tpl]
    a = CachingAllocator()
    R._replay_build(a, recs[-1])
    for s in range(len(tpl)):
        R._replay_step(a, tpl[s], s, [xs[-1]] * 2)
    assert a.stats() == _raw_replay(recs[-1]).stats()


def test_simulated_reserve_fixed_and_varying_lengths(tiny_run):
    from gpuwise.trace.reserved import MAX_FIXED_STEPS, simulate_reserved

    spec, cfg = tiny_run
    fixed = simulate_reserved(spec, cfg)
    st = fixed.stats
    assert st.peak_reserved >= st.peak_allocated > 20 * MIB and not fixed.growing
    assert fixed.steps < MAX_FIXED_STEPS                     # a step that added no segment ended it
    varying = simulate_reserved(spec, cfg, parse_lengths("uniform:8", cfg.seq_len), steps=50)
    assert varying.steps == 50 and varying.lengths.kind == "uniform"
    # segments cut for short batches cannot all serve longer ones: at least the fixed-length reserve
    # (strictly more on this model when written: 62 vs 60 MiB)
    assert varying.stats.peak_reserved >= st.peak_reserved
    assert varying.stats.peak_allocated <= st.peak_allocated    # no micro-batch is longer than seq_len


# --- the CLI ---------------------------------------------------------------------------------------------

def _json(capsys, *argv):
    from gpuwise.cli.main import main

    assert main(["memory", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_one_gpu_trace_reports_the_simulated_reserve(config_json, capsys):
    d = _json(capsys, config_json, "--method", "trace", "--seq-len", "128", "--batch-size", "4")
    sim = d["allocator"]
    assert sim["method"] == "simulated" and sim["growing"] is False and sim["segments"] >= 1
    assert sim["reserved_gib"] >= sim["allocated_gib"] > 0
    assert d["reserved_gib"] == pytest.approx(sim["reserved_gib"], abs=1e-3)      # the simulated reserve itself
    assert sim["allocated_gib"] == pytest.approx(d["allocated_gib"], rel=0.01)      # the two recordings agree
    assert any("allocator reserve simulated" in a for a in d["assumptions"])


def test_cli_multi_gpu_trace_keeps_the_fitted_fraction(config_json, capsys):
    d = _json(capsys, config_json, "--method", "trace", "--seq-len", "128", "--gpus", "2", "--zero", "3")
    assert "fitted" in d["allocator"]["method"] and "more than one GPU" in d["allocator"]["why"]


@pytest.mark.parametrize("extra", [(), ("--method", "trace", "--gpus", "2", "--zero", "3"),
                                   ("--method", "trace", "--lengths", "weird")])
def test_cli_refuses_lengths_it_cannot_simulate_in_one_line(config_json, capsys, extra, monkeypatch):
    """One stderr line, before any trace is run (a real model's trace takes minutes; the refusal needs none)."""
    import gpuwise.trace
    from gpuwise.cli.main import main

    traced = []
    real = gpuwise.trace.trace_memory
    monkeypatch.setattr(gpuwise.trace, "trace_memory", lambda *a, **k: traced.append(1) or real(*a, **k))

    lengths = () if "--lengths" in extra else ("--lengths", "uniform:8" if not extra else "fixed")
    assert main(["memory", config_json, "--seq-len", "128", *lengths, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lengths" in err[0] and "Traceback" not in err[0]
    assert traced == []


# --- the measurement shares the recorded step --------------------------------------------------------------

def test_the_trace_the_recording_and_gpu_measure_run_one_train_step(tiny_run, monkeypatch):
    """One loop: the memory trace, the allocation recording the simulation replays and validation.gpu_measure all
    run trace.step.train_step, counted by wrapping the real function, which still runs (on CPU here)."""
    from gpuwise.trace import step
    from gpuwise.trace.allocations import record_run
    from gpuwise.trace.run import StageRun, trace_phases
    from gpuwise.validation import gpu_measure

    calls = []
    real = step.train_step

    def counted(model, opts, cfg, batches, **kw):
        calls.append(kw.get("ops") or "FB" * len(batches))
        return real(model, opts, cfg, batches, **kw)

    monkeypatch.setattr(step, "train_step", counted)
    spec, cfg = tiny_run
    cfg = replace(cfg, micro_batch=1, seq_len=32, grad_accum=1)
    got = gpu_measure.measure(spec, cfg, device="cpu", steps=2)
    assert calls == ["FB", "FB"] and got.allocated is None and got.step_s > 0
    record_run(spec, replace(cfg, grad_accum=4), 32, steps=2)
    assert calls[2:] == ["FBFB", "FBFB"]
    phases = trace_phases(spec, replace(cfg, grad_accum=4), StageRun(spec.n_layers))
    assert calls[4:] == ["FBFB"] and [p for p, _ in phases].count("optimizer step") == 1


# --- a device's capacity: cached segments given back, then out of memory ------------------------------------

def test_a_full_device_gives_back_wholly_free_cached_segments_then_retries():
    from gpuwise.trace.allocator import OutOfMemory

    a = CachingAllocator(capacity=120 * MIB)
    a.malloc("a", 50 * MIB)
    a.malloc("b", 50 * MIB)
    a.free("a")
    a.malloc("c", 30 * MIB)          # splits a's segment: 20 MiB left free there
    a.free("b")                      # b's segment is wholly free
    a.malloc("d", 60 * MIB)          # 100 + 60 > 120: b's segment goes back, then 50 + 60 fit
    assert (a.reserved, a.segments, a.peak_reserved) == (110 * MIB, 2, 110 * MIB)
    with pytest.raises(OutOfMemory):
        a.malloc("e", 20 * MIB + 1)  # only 20 MiB free (in c's segment) and 10 MiB of capacity left


def test_free_bytes_split_across_segments_are_an_out_of_memory_error():
    from gpuwise.trace.allocator import OutOfMemory

    a = CachingAllocator(capacity=100 * MIB)
    a.malloc("a", 50 * MIB)
    a.malloc("b", 50 * MIB)
    a.free("a")
    a.malloc("c", 30 * MIB)          # a's segment: c and a 20 MiB free block
    a.free("b")
    a.malloc("b2", 25 * MIB)         # no room in the 20 MiB block: b's segment is split (25 MiB free there)
    a.malloc("e", 20 * MIB)          # the 20 MiB block fits it exactly
    a.free("e")
    with pytest.raises(OutOfMemory) as err:
        a.malloc("d", 30 * MIB)      # 45 MiB free in all, but no block of 30 and nothing wholly free to give back
    assert err.value.reserved - err.value.allocated == 45 * MIB and err.value.fragmentation
    assert "45.00 MiB reserved but unallocated" in str(err.value)


def test_device_runs_replay_only_between_the_allocated_and_reserved_peaks(tiny_run):
    from gpuwise.trace.reserved import device_runs, record

    spec, cfg = tiny_run
    replay = record(spec, cfg)
    free = replay.run()
    st = free.stats
    caps = {"roomy": st.peak_reserved, "tight": st.peak_allocated - MIB}
    runs = {r.gpu: r for r in device_runs(replay, free, caps)}
    assert runs["roomy"].oom is None and runs["roomy"].at_step == 0
    assert runs["tight"].oom is not None and runs["tight"].at_step >= 1
    assert runs["tight"].oom.capacity == caps["tight"]


def test_memory_prints_where_the_simulated_run_and_the_fit_rule_disagree():
    from gpuwise.cli.memory import _simulated_fit_lines
    from gpuwise.hardware.gpus import get_gpu

    class Est:                                   # the fit rule's verdict, as MemoryEstimate.fits gives it
        def fits(self, g):
            return True
    gpu = get_gpu("T4")
    oom = {"allocator": {"runs": {"T4": {"fits": False, "oom_step": 2, "capacity_gib": 14.3, "fragmentation": True,
                                          "oom": "tried to allocate 1.53 GiB ..."}}}}
    ok = {"allocator": {"runs": {"T4": {"fits": True, "oom_step": None, "capacity_gib": 14.3, "oom": None}}}}
    lines = _simulated_fit_lines(oom, Est(), [gpu])
    assert len(lines) == 1 and "T4" in lines[0] and "step 2" in lines[0] and "fragmentation" in lines[0]
    assert _simulated_fit_lines(ok, Est(), [gpu]) == [] and _simulated_fit_lines({}, Est(), [gpu]) == []


def test_an_out_of_memory_error_in_the_build_is_step_0(tiny_run):
    from gpuwise.trace.reserved import device_runs, record

    spec, cfg = tiny_run
    replay = record(spec, cfg)
    run = device_runs(replay, replay.run(), {"tiny": 1 * MIB})[0]
    assert run.oom is not None and run.at_step == 0


def test_cli_varying_lengths_state_they_are_not_validated(config_json, capsys):
    from gpuwise.cli.main import main
    from gpuwise.trace.reserved import VARYING_CAVEAT

    d = _json(capsys, config_json, "--method", "trace", "--seq-len", "64", "--lengths", "uniform:8")
    assert d["allocator"]["caveat"] == VARYING_CAVEAT and "uniform in 8..64" in d["allocator"]["lengths"]
    assert _json(capsys, config_json, "--method", "trace", "--seq-len", "64")["allocator"]["caveat"] is None
    assert main(["memory", config_json, "--method", "trace", "--seq-len", "64", "--lengths", "uniform:8"]) == 0
    assert "not validated" in capsys.readouterr().out


@pytest.mark.parametrize("text", ["lognormal:1:1e308", "lognormal:1e-300:1", "lognormal:5:1e200:drop"])
def test_lognormal_parameters_too_large_to_square_are_refused_not_crashed(text):
    with pytest.raises(InputError) as err:
        parse_lengths(text, 64)
    assert err.value.field == "lengths"


def test_a_varying_recording_replayed_at_the_fixed_length_is_the_fixed_recording(tiny_run):
    from gpuwise.trace.reserved import LengthDist, record

    spec, cfg = tiny_run
    varying = record(spec, cfg, parse_lengths("uniform:8", cfg.seq_len))
    fixed = LengthDist("fixed", cfg.seq_len)
    assert varying.at(fixed).run().stats == record(spec, cfg).run().stats
    with pytest.raises(ValueError):
        record(spec, cfg).at(parse_lengths("uniform:8", cfg.seq_len))    # one recorded length: no polynomial
