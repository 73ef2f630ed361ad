"""The runtime's device mode decision (gpuwise.runtime.devices.choose_devices): a pure function of the
override, the CUDA devices found and the cluster spec's slots. CUDA mode itself runs on a GPU machine
(examples/run/one-h200.yaml), not faked here."""

import pytest

from gpuwise.errors import InputError
from gpuwise.runtime.devices import choose_devices, describe


@pytest.mark.parametrize("override,found,slots,mode,count", [
    ("auto", 0, 1, "cpu", 0),       # a CPU machine (CI): fake slots
    ("auto", 1, 1, "cuda", 1),      # one H200 for one slot
    ("auto", 8, 4, "cuda", 4),      # more GPUs than slots: one each, the rest unused
    ("auto", 2, 8, "cpu", 0),       # fewer GPUs than slots: the fake cluster, stated
    ("cpu", 8, 4, "cpu", 0),        # forced fake slots on a GPU machine
    ("cuda", 4, 4, "cuda", 4),
])
def test_mode(override, found, slots, mode, count):
    d = choose_devices(override, found, slots, ("NVIDIA H200",) * found)
    assert (d.mode, d.count, d.found) == (mode, count, found)
    assert describe(d.as_dict()).startswith(f"devices: {mode}")


def test_auto_says_why_it_chose_cpu():
    assert "no CUDA device" in choose_devices("auto", 0, 2).why
    assert "fewer than the cluster spec's 8 slots" in choose_devices("auto", 2, 8).why


@pytest.mark.parametrize("found", [0, 3])
def test_cuda_with_too_few_devices_is_bad_input(found):
    with pytest.raises(InputError) as e:
        choose_devices("cuda", found, 4)
    msg = str(e.value)
    assert msg.startswith("--devices: 'cuda' is invalid") and f"{found} CUDA devices" in msg and "4 slots" in msg
    assert "--devices cpu" in msg and "\n" not in msg


def test_unknown_override_and_flag_named():
    with pytest.raises(InputError, match="give one of auto, cuda, cpu"):
        choose_devices("gpu", 1, 1)
    with pytest.raises(InputError, match="^--x: 'cuda'.*in the Ray cluster"):
        choose_devices("cuda", 0, 1, flag="--x", where="in the Ray cluster's GPU resources")
