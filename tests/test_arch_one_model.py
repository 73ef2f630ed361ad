"""One job performance model (issue 11, item 5): the listed callers go through
gpuwise.estimate.performance, the old duplicates are gone, and the fitted step-time forms form one
package with a registry and no import cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "gpuwise"

# the callers the issue lists (and the library modules they run through)
CALLERS = {
    "cli/memory.py": "job_performance",
    "estimate/feasible_plans.py": "memory_of",            # fit-gpus -> plan/fit_gpus.py -> here
    "cli/estimate.py": "job_performance",
    "estimate/job_estimate.py": "JobPerformance",
    "plan/candidates.py": "job_performance",
    "policies/frenzy.py": "batch_range",                 # the PerfModel (job_model_perf -> JobModel -> here)
    "estimate/job_model.py": "AnalyticalSource",          # rent perfmodel, job_model_perf, simulator
    "plan/rent/perfmodel.py": "JobModel",
    "plan/online_search.py": "best_of",
}
# the black boxes only the entry point calls (validation/ checks them directly, on purpose)
BLACK_BOXES = {"estimate_memory", "analytical_step_time"}
ALLOWED = {"estimate/performance.py", "estimate/memory.py", "estimate/step_time.py"}


def _tree(rel: str) -> ast.Module:
    return ast.parse((PKG / rel).read_text(), rel)


def _names(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            out.update(a.name for a in node.names)
    return out


def test_black_boxes_are_called_only_by_the_entry_point():
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in ALLOWED or rel.startswith("validation/"):
            continue
        hit = _names(ast.parse(path.read_text(), rel)) & BLACK_BOXES
        if hit:
            offenders.append(f"{rel}: {sorted(hit)}")
    assert not offenders, "call gpuwise.estimate.performance.job_performance instead: " + "; ".join(offenders)


@pytest.mark.parametrize("rel,name", sorted(CALLERS.items()))
def test_listed_callers_use_the_entry_point(rel, name):
    assert name in _names(_tree(rel)), f"{rel} should go through {name}"


def test_old_duplicates_are_gone():
    """One definition each: checkpoint size, the memory-limit search, the analytical JobModel source."""
    defined: dict[str, list[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign)):
                names = [node.name] if not isinstance(node, ast.Assign) else \
                    [t.id for t in node.targets if isinstance(t, ast.Name)]
                for n in names:
                    defined.setdefault(n, []).append(rel)
    for gone in ("choose_layout", "checkpoint_size_gb", "CKPT_BYTES_PER_PARAM", "_checkpoint_gb",
                 "AnalyticalStepTime"):
        assert gone not in defined, f"{gone} still defined in {defined.get(gone)}"
    for one in ("checkpoint_size", "largest_micro_batch", "batch_configs", "best_of", "AnalyticalSource",
                "memory_of", "step_of"):
        assert defined.get(one) == ["estimate/performance.py"], (one, defined.get(one))


def _calls_in(rel: str, func: str) -> set[str]:
    for node in ast.walk(_tree(rel)):
        if isinstance(node, ast.FunctionDef) and node.name == func:
            return _names(node)
    raise AssertionError(f"{func} not found in {rel}")


def test_one_batch_search():
    """The planner's candidates, JobModel.best_batch and the online search pick batches with the same
    candidate generator / scorer; `estimate JOB.yaml` runs the planner's per-shape search."""
    assert {"batch_configs", "best_of"} <= _calls_in("plan/candidates.py", "evaluate_shape")
    assert {"batch_configs", "best_of"} <= _calls_in("estimate/job_model.py", "best_batch")
    assert "best_of" in _calls_in("plan/online_search.py", "predict_space")
    assert "evaluate_shape" in _calls_in("cli/estimate.py", "_from_spec")


FITS = PKG / "estimate" / "fits"


def test_fits_package_one_module_per_form_no_cycle():
    from gpuwise.estimate.fits import FORMS, REGISTRY

    assert set(FORMS) <= set(REGISTRY) and {"pollux", "extended", "bottleneck", "affine"} == set(REGISTRY)
    for name, form in REGISTRY.items():
        assert form.params_type.__module__ == f"gpuwise.estimate.fits.{name}"
    # forms and helpers never import the registry or the package root (that would be a cycle)
    for path in sorted(FITS.glob("*.py")):
        if path.name in ("__init__.py", "registry.py", "online.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module not in ("gpuwise.estimate.fits", "gpuwise.estimate.fits.registry"), path.name
                assert not node.module.startswith(("gpuwise.estimate.memory", "gpuwise.estimate.step_time",
                                                   "gpuwise.estimate.performance")), path.name
    # importing any module first works (a cycle would fail for some order)
    code = ";".join(f"import gpuwise.estimate.fits.{p.stem}" for p in sorted(FITS.glob("*.py"), reverse=True)
                    if p.stem != "__init__")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
