"""What a workload row trains: a built-in small model (``application``), the user's script
(``entrypoint``) or a model on the user's data (``model`` + ``data``, by the bundled trainer), and
the launch description the actuator hands a slot actor for a script job (`gpuwise.runtime.script`)."""

from __future__ import annotations

import shlex
from pathlib import Path

from gpuwise.errors import InputError, unknown_name

SCRIPT_MAX_LOCAL = 32   # per-slot batch of script and model jobs unless the row says (stands in for memory)
LR_RULES = ("sqrt", "linear", "adascale", "none")


def trainer_path() -> Path:
    import gpuwise.elastic

    return Path(gpuwise.elastic.__file__).resolve().parent / "trainer.py"


def _path(base: Path, raw: str, field: str, what: str) -> Path:
    p = (base / raw).resolve()
    if not p.exists():
        raise InputError(field, raw, f"no such {what} (relative paths start at {base})")
    return p


def _get(r: dict, col: str) -> str | None:
    v = r.get(col)
    return None if v in (None, "") else str(v).strip()


def job_kind(r: dict, where: str, base: Path) -> dict:
    """The RunJob fields that say what a row trains (checked: one of the three kinds, files exist)."""
    from gpuwise.runtime.script import uses_elastic
    from gpuwise.runtime.small_models import small_models

    app, entry, model, data = (_get(r, c) for c in ("application", "entrypoint", "model", "data"))
    given = [c for c, v in (("application", app), ("entrypoint", entry), ("model", model)) if v]
    if len(given) != 1:
        raise InputError(f"{where} columns application/entrypoint/model", ",".join(given) or "none",
                         "give exactly one: application (tiny-llama, tiny-resnet), entrypoint (your script) or "
                         "model + data")
    rule = _get(r, "lr_scaling") or "sqrt"
    if rule not in LR_RULES:
        raise InputError(f"{where} column lr_scaling", rule, "use one of " + ", ".join(LR_RULES))
    if app:
        if app not in small_models():
            raise unknown_name(f"{where} column application", app, small_models())
        return {"application": app}
    common = {"lr_scaling": rule, "cwd": str(base), "max_local_batch": SCRIPT_MAX_LOCAL}
    if entry:
        argv = shlex.split(entry)
        script = _path(base, argv[0], f"{where} column entrypoint", "script")
        return {"application": "script", "argv": (str(script), *argv[1:]), "elastic": uses_elastic(script), **common}
    if not data:
        raise InputError(f"{where} column data", "", "a model job needs data: a .txt, a .jsonl or a saved datasets folder")
    argv = [str(trainer_path()), "--model", _model_ref(base, model),
            "--data", str(_path(base, data, f"{where} column data", "data file or folder"))]
    for col in ("weights", "tokenizer"):
        if v := _get(r, col):
            argv += [f"--{col}", str(_path(base, v, f"{where} column {col}", f"{col} folder"))]
    return {"application": "model", "argv": tuple(argv), "elastic": True, **common}


def _model_ref(base: Path, model: str) -> str:
    """A config file that exists relative to the workload is passed as an absolute path; a preset or a
    Hugging Face id as it is (the trainer resolves them)."""
    p = base / model
    return str(p.resolve()) if model.endswith(".json") and p.exists() else model


def launch_spec(job, name: str, batch: int, chunk_steps: int, resume: str | None, job_dir: Path,
                launch: int) -> dict:
    """What a slot actor needs to start one rank of a script job."""
    return {"name": name, "argv": list(job.argv), "elastic": job.elastic, "batch": int(batch),
            "ref_batch": int(job.batch_size), "chunk_steps": int(chunk_steps), "resume": resume,
            "lr_scaling": job.lr_scaling, "cwd": job.cwd, "job_dir": str(job_dir.resolve()),
            "control_dir": str((job_dir / "control" / f"launch-{launch:03d}").resolve())}


def describe(job) -> str:
    """What a job trains, in words (the run's output says so per job)."""
    argv = getattr(job, "argv", None)
    if argv is None:
        return f"built-in model {job.application}"
    if job.application == "model":
        return "model job: " + " ".join(Path(a).name if a.startswith("/") else a for a in argv[1:])
    name = " ".join([Path(argv[0]).name, *argv[1:]])
    if job.elastic:
        return f"script {name} (elastic: gpuwise.elastic)"
    return (f"script {name} (rigid: it does not use gpuwise.elastic, so it trains at its own batch and is "
            "restarted, from its own checkpoints if it writes any, whenever its allocation changes)")
