"""The peak diagnosis (gpuwise.validation.gpu_peak) replays an allocator history: the peak's moment, the
blocks alive then, and the code line each came from. Checked here on a written history (no GPU in CI);
on a GPU the history is PyTorch's own (docs/gpu-runs.md)."""

from gpuwise.validation.gpu_peak import by_site, live_at, parse_entry, peak_index

NN = {"filename": "/x/gpuwise/nn/functions.py", "line": 60, "name": "attention"}
LOSS = {"filename": "/x/gpuwise/nn/loss.py", "line": 12, "name": "cross_entropy"}
TORCH = {"filename": "/y/site-packages/torch/optim/adamw.py", "line": 400, "name": "_multi_tensor_adamw"}


def ev(action, addr, size, *frames):
    return {"action": action, "addr": addr, "size": size, "frames": list(frames)}


def test_peak_is_the_largest_live_sum_and_its_blocks_are_attributed():
    events = [ev("alloc", 1, 100, NN), ev("alloc", 2, 300, LOSS, NN), ev("free_requested", 1, 100),
              ev("free_completed", 1, 100), ev("alloc", 3, 150, TORCH), ev("free_requested", 2, 300),
              ev("alloc", 4, 50, NN)]
    at, peak = peak_index(events)
    assert (at, peak) == (4, 450)                 # blocks 2 and 3: 300 + 150 (block 1 freed before)
    live = live_at(events, at)
    assert sorted(b["addr"] for b in live) == [2, 3]
    sites = {s: (round(g * 2 ** 30), n) for s, g, n in by_site(live)}
    assert sites == {"gpuwise/nn/loss.py:12 cross_entropy": (300, 1),
                     "torch/optim/adamw.py:400 _multi_tensor_adamw": (150, 1)}


def test_a_grid_entry_parses_as_gpu_measure_writes_it():
    assert parse_entry("llama-3.2-1b,1,32768,bf16-mixed,full,0,,") == \
        ("llama-3.2-1b", 1, 32768, "bf16-mixed", "full", 0, None, "")
    assert parse_entry("mistral-7b,2,2048,bf16-mixed,none,16,nf4,compile=1")[6:] == ("nf4", "compile=1")
