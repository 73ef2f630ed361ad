"""Cross-check of the GPU table against the bundled llm-analysis GPU configs (cli99/llm-analysis).

Datasheets win: every disagreement beyond 3% must be listed here with its reason, so a typo in
gpus.csv (or a new reference file) cannot pass silently.
"""

import json

import pytest

from gpuwise.data import data_path
from gpuwise.hardware.gpus import get_gpu

MAPPING = {
    "a10-pcie-28gb": "A10", "a100-pcie-40gb": "A100-40GB-PCIE", "a100-pcie-80gb": "A100-80GB-PCIE",
    "a100-sxm-40gb": "A100-40GB-SXM", "a100-sxm-80gb": "A100-80GB-SXM", "a10g-pcie-24gb": "A10G",
    "a6000-48gb": "RTX-A6000", "h100-pcie-80gb": "H100-80GB-PCIE", "h100-sxm-80gb": "H100-80GB-SXM",
    "mi100-32gb": "MI100", "mi210-64gb": "MI210", "mi250-128gb": "MI250", "mi250x-128gb": "MI250X",
    "v100-pcie-16gb": "V100-16GB-PCIE", "v100-pcie-32gb": "V100-32GB-PCIE", "v100-sxm-16gb": "V100-16GB-SXM2",
    "v100-sxm-32gb": "V100-32GB-SXM2",
}
# (reference file, field) -> why the datasheet value differs
KNOWN_DIFFERENCES = {
    ("a10-pcie-28gb", "mem_per_GPU_in_GB"): "llm-analysis error: the A10 is a 24 GB card (NVIDIA A10 datasheet)",
    ("v100-sxm-16gb", "mem_per_GPU_in_GB"): "llm-analysis error: 16 GB part listed with 32 GB",
    ("a100-pcie-40gb", "intra_node_bandwidth_in_GB_per_sec"): "llm-analysis assumes an NVLink bridge; gpuwise uses PCIe4",
    ("a100-pcie-80gb", "intra_node_bandwidth_in_GB_per_sec"): "llm-analysis assumes an NVLink bridge; gpuwise uses PCIe4",
    ("h100-pcie-80gb", "intra_node_bandwidth_in_GB_per_sec"): "llm-analysis assumes an NVLink bridge; gpuwise uses PCIe5",
    ("a6000-48gb", "intra_node_bandwidth_in_GB_per_sec"): "llm-analysis assumes the 2-GPU NVLink bridge; gpuwise uses PCIe4",
}
FIELDS = {"mem_per_GPU_in_GB": "memory_gib", "hbm_bandwidth_in_GB_per_sec": "hbm_gbps",
          "intra_node_bandwidth_in_GB_per_sec": "intra_node_gbps", "peak_fp16_TFLOPS": "fp16_tflops"}


def test_every_reference_file_is_mapped():
    files = {p.stem for p in data_path("gpu_specs_reference", "llm-analysis").glob("*.json")}
    assert files == set(MAPPING)


@pytest.mark.parametrize("ref", sorted(MAPPING))
def test_table_agrees_with_reference_or_difference_is_explained(ref):
    data = json.loads(data_path("gpu_specs_reference", "llm-analysis", f"{ref}.json").read_text())
    spec = get_gpu(MAPPING[ref])
    for ref_field, our_field in FIELDS.items():
        theirs, ours = float(data[ref_field]), getattr(spec, our_field)
        agree = abs(ours - theirs) <= 0.03 * max(abs(theirs), 1e-9)
        assert agree != ((ref, ref_field) in KNOWN_DIFFERENCES), (ref, ref_field, ours, theirs)
