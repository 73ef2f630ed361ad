"""A node's network in the planner: a 1-GPU VM gets its share of the host's NIC, and ZeRO-3 over such
VMs pays for gathering every weight (LoRA's frozen ones too) over it."""

from __future__ import annotations

from pathlib import Path

from gpuwise.hardware.catalog import load_catalog
from gpuwise.plan.job import from_jobspec
from gpuwise.plan.offerings import node_network, region_offerings
from gpuwise.workload.jobspec import load_job

LORA = Path(__file__).resolve().parents[1] / "examples" / "llama-3.1-8b-lora.yaml"


def test_one_gpu_vm_gets_its_share_of_the_host_nic():
    cat = load_catalog(include_user=False)
    offs = region_offerings([o for o in cat.offerings if o.gpu == "L4"])
    nic = node_network(offs, cat.offerings)
    assert nic[("L4", 8)] == 12.5 and nic[("L4", 1)] == 12.5 / 8   # g6.48xlarge / g2-standard-96 vs g6.xlarge


def test_zero3_lora_over_one_gpu_vms_is_slower_than_one_host():
    good = from_jobspec(load_job(LORA)).goodput
    host = good.shape("L4", 8, 1, inter_node_gbps=12.5).best
    vms = good.shape("L4", 1, 8, inter_node_gbps=12.5 / 8).best
    assert vms.plan.zero == 3 and vms.step_time_s > 2 * host.step_time_s
