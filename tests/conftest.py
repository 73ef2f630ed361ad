"""Suite-wide settings.

One BLAS / OpenMP thread per test process: pytest-xdist already runs one worker per core, and the
small SciPy fits (L-BFGS-B), NumPy and PyTorch work of the tests gain nothing from more threads, while
OpenBLAS's spinning threads on a shared 2-core machine cost 2-4x the CPU (Scavenger's demo search:
5.1 s CPU with the default threads, 1.4 s with one). Set here, before NumPy, SciPy or torch is
imported in the session: xdist's workers and the tests' subprocesses inherit it. An explicit
setting in the environment wins.
"""

import json
import os

import pytest

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


# Longest first: pytest-xdist's --dist loadgroup hands out work in collection order, so the Ray cluster's
# group (tests/test_runtime_ray.py: a cluster started once, then runs of minutes, the longest unit of the
# suite), collected late by file name, used to start last and finish alone on one worker. Collected first,
# it runs on one worker while the short tests fill the other. Everything else keeps the collection order
# (the server group's timing-sensitive tests too: they start no earlier than before).


def _group(item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: _group(item) != "ray")


def pytest_configure_node(node):
    """(xdist controller) tell each worker the controller's --dist: pytest 9.2.0 leaves the workers'
    copy at "no", and with it xdist_group silently stops working."""
    node.workerinput["gpuwise_dist"] = node.config.getoption("dist", "no")


def pytest_collection_finish(session):
    """Fail loudly if pytest-xdist ignores the groups: pytest 9.2.0 with xdist 3.8.0 drops the
    "@group" suffix, so the Ray and server groups were split over both workers (each started its own
    cluster or server: slower, and tests sharing one fixture saw two)."""
    dist = getattr(session.config, "workerinput", {}).get("gpuwise_dist")
    if dist != "loadgroup":
        return
    lost = [item.nodeid for item in session.items if _group(item) and "@" not in item.nodeid]
    if lost:
        raise RuntimeError(f"pytest-xdist ignored xdist_group on {len(lost)} tests (e.g. {lost[0]}); "
                           "install the pytest that the [test] extra pins")


@pytest.fixture(scope="session")
def config_json(tmp_path_factory):
    """A tiny llama-type config.json (2 layers, hidden 128): a model named by path, traced in seconds."""
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256,
                                "vocab_size": 512}))
    return str(path)
