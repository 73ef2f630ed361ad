"""GPU table: required parts, datasheet values, aliases, unknown-name suggestions.

Expected numbers are vendor datasheet values (dense, no sparsity), checked exactly (tolerance 0.1%):
NVIDIA A100 datasheet (SXM 80GB: 312 bf16, 156 tf32, 19.5 fp32, 2039 GB/s), NVIDIA H100 datasheet
(SXM: 989.4 bf16 = 1979/2, 1978.9 fp8, 66.9 fp32, 3350 GB/s), NVIDIA V100 datasheet (SXM2 125 fp16 tensor,
900 GB/s), AMD MI300X datasheet (192 GB, 5.3 TB/s, 1307.4 bf16 dense).
"""

import math

import pytest
from hypothesis import given, strategies as st

from gpuwise.errors import InputError
from gpuwise.hardware.gpus import all_gpus, get_gpu, known_names, resolve_gpu_name

REQUIRED = ["K80", "P100", "V100", "V100-32GB", "V100-PCIE", "V100-PCIE-32GB", "T4", "A10", "A10G", "L4",
            "L40S", "RTX-2080-Ti", "Quadro-RTX-6000", "A100-40GB-PCIE", "A100-40GB-SXM", "A100-80GB-PCIE",
            "A100-80GB-SXM", "H100-80GB-PCIE", "H100-80GB-SXM", "H200", "B200", "MI250X", "MI300X",
            "RTX-A6000", "L40", "H100-NVL", "GH200", "RTX-3080", "RTX-3090", "RTX-4080", "RTX-4090", "RTX-5090",
            "RTX-A4000", "RTX-A5000", "RTX-6000-Ada"]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_gpus_present(name):
    spec = get_gpu(name)
    assert spec.memory_gib > 0 and spec.fp32_tflops > 0 and spec.hbm_gbps > 0 and spec.intra_node_gbps > 0
    assert spec.source  # every row cites its source


@pytest.mark.parametrize("name,field,value", [
    ("A100-80GB-SXM", "bf16_tflops", 312), ("A100-80GB-SXM", "tf32_tflops", 156),
    ("A100-80GB-SXM", "fp32_tflops", 19.5), ("A100-80GB-SXM", "hbm_gbps", 2039),
    ("A100-40GB-SXM", "hbm_gbps", 1555), ("A100-80GB-PCIE", "hbm_gbps", 1935),
    ("H100-80GB-SXM", "bf16_tflops", 989.4), ("H100-80GB-SXM", "fp8_tflops", 1978.9),
    ("H100-80GB-SXM", "fp32_tflops", 66.9), ("H100-80GB-SXM", "hbm_gbps", 3350),
    ("H100-80GB-SXM", "intra_node_gbps", 450),  # NVLink4 900 GB/s bidirectional -> 450 one way
    ("V100-16GB-SXM2", "fp16_tflops", 125), ("V100-16GB-SXM2", "memory_gib", 16),
    ("V100-32GB-SXM2", "memory_gib", 32), ("A10", "memory_gib", 24), ("T4", "fp16_tflops", 65),
    ("MI300X", "memory_gib", 192), ("MI300X", "bf16_tflops", 1307.4), ("H200", "hbm_gbps", 4800),
    # GeForce: tensor rates with fp32 accumulate (GA102 / Ada / RTX Blackwell whitepapers, Appendix A)
    ("RTX-3090", "bf16_tflops", 71), ("RTX-3090", "hbm_gbps", 936), ("RTX-4090", "bf16_tflops", 165.2),
    ("RTX-4090", "fp32_tflops", 82.6), ("RTX-4090", "hbm_gbps", 1008), ("RTX-5090", "memory_gib", 32),
    ("RTX-5090", "hbm_gbps", 1792), ("RTX-5090", "bf16_tflops", 209.5),
    # workstation datasheets: sparse tensor figure halved
    ("RTX-A5000", "bf16_tflops", 111.1), ("RTX-A5000", "hbm_gbps", 768), ("RTX-6000-Ada", "fp8_tflops", 728.5),
    ("RTX-6000-Ada", "bf16_tflops", 364.2), ("RTX-6000-Ada", "hbm_gbps", 960),
])
def test_datasheet_values(name, field, value):
    assert math.isclose(getattr(get_gpu(name), field), value, rel_tol=1e-3)


def test_llm_analysis_known_errors_not_copied():
    # llm-analysis says v100-sxm-16gb has 32 GB and calls the A10 a 28 GB card; datasheets say 16 and 24.
    assert get_gpu("V100").memory_gib == 16
    assert get_gpu("A10").memory_gib == 24


def test_units_absent_where_the_part_has_none():
    assert get_gpu("V100").bf16_tflops is None and get_gpu("V100").tf32_tflops is None
    assert get_gpu("A100").fp8_tflops is None and get_gpu("H100").fp8_tflops is not None
    assert get_gpu("V100").peak_tflops("bf16") == 125  # falls back to fp16 tensor


@pytest.mark.parametrize("alias,canonical", [
    ("A100", "A100-40GB-SXM"), ("A100-80GB", "A100-80GB-SXM"), ("H100", "H100-80GB-SXM"),
    ("H100-MEGA", "H100-80GB-SXM"), ("h100-80gb", "H100-80GB-SXM"), ("V100", "V100-16GB-SXM2"),
    ("V100-32GB", "V100-32GB-SXM2"), ("a10g", "A10G"), ("L4", "L4"), ("t4", "T4"), ("K80", "K80"),
    ("P100", "P100-16GB-PCIE"), ("RTX6000", "Quadro-RTX-6000"), ("A6000", "RTX-A6000"),
    ("H200", "H200-SXM"), ("B200", "B200"), ("MI300X", "MI300X"), ("a100_80gb sxm", "A100-80GB-SXM"),
    ("4090", "RTX-4090"), ("NVIDIA GeForce RTX 3090", "RTX-3090"), ("rtx 5090", "RTX-5090"), ("A5000", "RTX-A5000"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"), ("RTX6000", "Quadro-RTX-6000"),
])
def test_aliases(alias, canonical):
    assert resolve_gpu_name(alias) == canonical
    assert get_gpu(alias).name == canonical


def test_unknown_name_suggests_closest():
    with pytest.raises(InputError) as exc:
        get_gpu("H10")
    assert exc.value.field == "gpu" and "did you mean" in str(exc.value) and "H100" in str(exc.value)
    assert resolve_gpu_name("TPU-v4") is None and resolve_gpu_name("") is None


def test_names_are_unique_and_sane():
    specs = all_gpus()
    assert len({s.name for s in specs}) == len(specs)
    for s in specs:
        # dense tensor peaks are ordered: fp8 >= bf16 >= tf32 where present, all >= the fp32 vector peak
        if s.fp8_tflops:
            assert s.fp8_tflops >= (s.bf16_tflops or 0)
        if s.tf32_tflops:
            assert (s.bf16_tflops or s.fp16_tflops) >= s.tf32_tflops >= s.fp32_tflops * 0.99
        assert s.vendor in ("nvidia", "amd")


@given(st.sampled_from(known_names()), st.sampled_from(["lower", "upper", "underscore"]))
def test_any_spelling_of_a_known_name_resolves(name, style):
    variant = {"lower": name.lower(), "upper": name.upper(), "underscore": name.replace("-", "_")}[style]
    assert resolve_gpu_name(variant) == resolve_gpu_name(name) is not None


@pytest.mark.parametrize("name", ["RTX-3090", "RTX-4090", "RTX-5090", "RTX-A5000", "RTX-6000-Ada", "RTX-A6000"])
def test_consumer_cards_fit_on_what_pytorch_can_allocate(name):
    """Consumer/workstation cards: PCIe without NVLink, and `fits` compares against the device memory
    PyTorch reports (device_mib, with its source), not the datasheet GB."""
    from gpuwise.estimate.memory import HEADROOM_FRACTION, estimate_memory
    from gpuwise.workload.training import TrainingConfig

    g = get_gpu(name)
    assert g.interconnect.startswith("PCIe") and g.intra_node_gbps <= 64
    assert g.device_mib and g.device_mib_source and g.device_mib < g.memory_gib * 1024
    est = estimate_memory("gpt2", TrainingConfig(micro_batch=1, seq_len=1024))
    f = est.fit_gib(g)
    assert f["device"] == pytest.approx(g.device_mib / 1024)
    assert f["usable"] == pytest.approx(g.device_mib / 1024 * (1 - HEADROOM_FRACTION))


@pytest.mark.parametrize("argv", [
    ["estimate", "--model", "gpt2", "--gpu", "a100", "--gpus", "1", "--batch-size", "2"],
    ["memory", "gpt2", "--gpu", "A100"],
    ["catalog", "--gpu", "a100"],
    ["fit-gpus", "gpt2", "--gpu", "A100"],
])
def test_bare_a100_asks_which(argv, capsys):
    """A user's bare A100 may be the 40 GB or the 80 GB part (2x the memory): one line asking which, exit 2."""
    from gpuwise.cli.main import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "A100-40GB or A100-80GB" in err, err
    assert main([*argv[:argv.index("--gpu") + 1], "A100-80GB", *argv[argv.index("--gpu") + 2:], "--json"]) == 0
