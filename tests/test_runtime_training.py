"""The runtime trains the project's own models (gpuwise.nn) for real: a slot worker, run in this
process (a gloo group of one), builds each small model from its config file and its loss falls."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuwise.nn import ResNetConfig, build_model, build_resnet  # noqa: E402
from gpuwise.runtime.small_models import small_model, small_models  # noqa: E402
from gpuwise.workload.models import param_count, preset_info  # noqa: E402


def _n(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_small_models_come_from_config_files_with_exact_counts():
    assert set(small_models()) == {"tiny-llama", "tiny-resnet"}
    lm = small_model("tiny-llama")
    assert lm.spec.family == "llama" and _n(build_model(lm.spec)) == param_count(lm.spec) == 82_240
    # the ResNet builder reproduces the resnet18-cifar10 preset's published count exactly
    assert _n(build_resnet(ResNetConfig())) == preset_info("resnet18-cifar10").published_params


@pytest.fixture(scope="module")
def worker():
    from gpuwise.runtime.worker import SlotWorker

    w = SlotWorker("local/0")
    yield w
    w.teardown()


@pytest.mark.slow
@pytest.mark.parametrize("app, batch, steps", [("tiny-llama", 16, 40), ("tiny-resnet", 32, 25)])
def test_a_slot_worker_trains_a_gpuwise_nn_model_and_its_loss_falls(worker, tmp_path, app, batch, steps):
    from gpuwise.runtime.worker import free_port

    worker.setup({"model": app, "seed": 3, "lr": 3e-3}, 0, 1, "127.0.0.1", free_port(), None, 60.0)
    assert type(worker.model).__module__.startswith("gpuwise.nn.")
    ckpt = tmp_path / "c.pt"
    out = worker.chunk(0, steps, batch, 3e-3, str(ckpt))
    assert out["end_step"] == steps and ckpt.is_file() and not (tmp_path / "c.pt.tmp").exists()
    first, last = sum(out["loss"][:5]) / 5, sum(out["loss"][-5:]) / 5
    assert last < 0.8 * first, out["loss"]
    assert all(s > 0 for s in out["step_s"]) and all(v >= 0 for v in out["small_sq"])
    worker.teardown()
