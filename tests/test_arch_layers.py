"""Layer order of DEVELOPERS.md, checked on the source: lower layers never import higher ones.

hardware -> workload -> estimate -> plan / policies -> control -> sim / runtime / validation -> cli / service.
`gpuwise.control` (issue 12) is the controller the simulator and the runtime share.
Every import is parsed with `ast` (module level, inside functions, under TYPE_CHECKING, relative
imports resolved), so a lazy import inside a function cannot hide an upward dependency.
`gpuwise.validation` (estimators scored against measured data, with simulated ground truth) is not
named in DEVELOPERS.md; it sits with sim / runtime because it drives the simulator's ground truth and
only the CLI calls it. `gpuwise.errors`, `gpuwise.user_files`, `gpuwise.data` and `gpuwise/__init__.py` are the base
everyone may import; `gpuwise/__main__.py` is the entry point (cli level).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gpuwise

PKG = Path(gpuwise.__file__).resolve().parent

# top-level part of gpuwise -> layer rank (a module may import its own rank or lower)
LAYERS: dict[str, int] = {
    "errors": 0, "data": 0, "__init__": 0, "user_files": 0,
    "hardware": 1,
    "workload": 2,
    "estimate": 3, "nn": 3, "trace": 3,
    "plan": 4, "policies": 4,
    "control": 5,
    "sim": 6, "runtime": 6, "elastic": 6, "validation": 6, "jobqueue": 6,
    "cli": 7, "service": 7, "__main__": 7,
}

# Known violations in files this reviewer may not edit, reported to their owners. Each entry is
# (importing module, imported module); the test below is xfail(strict=True) only while one of these
# is present, and any violation NOT listed here still fails it.
KNOWN: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(path: Path) -> list[str]:
    """Dotted parts of the package a relative import in `path` starts from."""
    rel = path.relative_to(PKG.parent).with_suffix("")
    return list(rel.parts[:-1])


def _targets(path: Path, node: ast.AST) -> list[tuple[int, str]]:
    """(line, imported module) for one import node; `from X import a` also yields X.a (a may be a module)."""
    if isinstance(node, ast.Import):
        return [(node.lineno, a.name) for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = _package_of(path)
            base = base[: len(base) - (node.level - 1)]
            mod = ".".join(base + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        return [(node.lineno, mod)] + [(node.lineno, f"{mod}.{a.name}") for a in node.names if a.name != "*"]
    return []


def _rank(module: str) -> int | None:
    """Layer rank of a gpuwise module (None for third-party modules)."""
    parts = module.split(".")
    if parts[0] != "gpuwise":
        return None
    if len(parts) == 1:
        return LAYERS["__init__"]
    return LAYERS.get(parts[1], LAYERS["__init__"] if parts[1] == "__version__" else -1)


def source_files() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def find_violations() -> list[tuple[str, str, str]]:
    """(location 'file:line', importer module, imported module) for every upward import."""
    out = []
    for path in source_files():
        me = _module_name(path)
        my_rank = _rank(me)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            for line, target in _targets(path, node):
                rank = _rank(target)
                if rank is None or rank == -1:
                    continue
                if rank > my_rank:
                    # `from gpuwise.x import name` yields both gpuwise.x and gpuwise.x.name; report once
                    if any(v[1] == me and target.startswith(v[2] + ".") for v in out):
                        continue
                    out.append((f"{path.relative_to(PKG.parent)}:{line}", me, target))
    return out


def test_every_part_of_the_package_has_a_layer():
    """A new top-level package must be placed in the layer order before it can be imported."""
    tops = {p.relative_to(PKG).parts[0].removesuffix(".py") for p in source_files()}
    unknown = sorted(tops - set(LAYERS))
    assert not unknown, f"gpuwise parts with no layer in tests/test_arch_layers.py LAYERS: {unknown}"


def test_resolver_sees_lazy_and_relative_imports():
    """The parser must see imports inside functions and resolve relative ones, or the check is blind."""
    src = "def f():\n    from ..sim import engine\n    import gpuwise.cli.main\n"
    fake = PKG / "estimate" / "x.py"
    tree = ast.parse(src)
    found = [t for n in ast.walk(tree) for _, t in _targets(fake, n)]
    assert "gpuwise.sim" in found and "gpuwise.sim.engine" in found and "gpuwise.cli.main" in found
    assert _rank("gpuwise.sim.engine") > _rank("gpuwise.estimate.x")


def _unlisted() -> list[tuple[str, str, str]]:
    return [v for v in find_violations() if (v[1], v[2]) not in KNOWN]


def test_no_unlisted_upward_imports():
    """Violations not in KNOWN fail outright (new ones can never hide behind the xfail below)."""
    bad = _unlisted()
    assert not bad, "upward imports (lower layer importing a higher one):\n" + "\n".join(
        f"  {loc}: {me} imports {target}" for loc, me, target in bad)


_KNOWN_PRESENT = {(v[1], v[2]) for v in find_violations()} & KNOWN


@pytest.mark.xfail(bool(_KNOWN_PRESENT), strict=True,
                   reason="known upward imports in files owned by the performance engineer "
                          "(see KNOWN); fails loudly once they are fixed so the entry is removed")
def test_no_upward_imports_at_all():
    bad = find_violations()
    assert not bad, "upward imports:\n" + "\n".join(f"  {loc}: {me} imports {t}" for loc, me, t in bad)


def test_known_list_is_not_stale():
    """Each KNOWN entry must still be a real violation (remove it once its owner fixes it)."""
    stale = KNOWN - {(v[1], v[2]) for v in find_violations()}
    assert not stale, f"fixed upward imports still listed in KNOWN: {sorted(stale)}"


def test_cli_modules_import_no_heavy_libraries():
    """DEVELOPERS.md: heavy imports (scipy, matplotlib, rich, pydantic) live inside functions so
    start-up stays fast (issue 2: `gpuwise memory` answers well under a second). Importing every
    command module, and running `memory --json`, must load none of them (numpy is allowed)."""
    import subprocess
    import sys

    from gpuwise.cli.main import COMMANDS

    mods = sorted({m for m, _ in COMMANDS.values()} | {"main", "output"})
    code = ("import importlib, sys, io, contextlib\n"
            f"for m in {mods!r}: importlib.import_module('gpuwise.cli.' + m)\n"
            "heavy = ('scipy', 'matplotlib', 'rich', 'pydantic')\n"
            "print(','.join(h for h in heavy if h in sys.modules))\n"
            "from gpuwise.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(['memory', 'llama-3.1-8b', '--json'])\n"
            "print(','.join(h for h in heavy if h in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    on_import, after_memory = (out.splitlines() + ["", ""])[:2]
    assert on_import == "", f"importing the CLI modules loads {on_import}"
    assert after_memory == "", f"`gpuwise memory --json` loads {after_memory}"
