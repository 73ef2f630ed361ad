"""The fitted step-time forms form one package with a registry, and every module of it imports
first without a cycle (importing them in reverse order runs in a fresh interpreter)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "gpuwise"

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
