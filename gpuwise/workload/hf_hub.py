"""Hugging Face Hub model ids (``meta-llama/Llama-3.1-8B``), as `accelerate estimate-memory` takes them.

An id listed in gpuwise/data/hf_model_ids.csv is that bundled preset (same architecture; no download).
Any other id's ``config.json`` is fetched with huggingface_hub (optional extra: pip install 'gpuwise[hf]')
into huggingface_hub's own cache (HF_HOME / HF_HUB_CACHE respected; HF_HUB_OFFLINE=1 reads only the
cache; HF_TOKEN for gated and private repos) and read by `hf_config.spec_from_config`. Every failure is
one InputError naming the id and the fix.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from gpuwise.data import data_path, read_commented_csv
from gpuwise.errors import InputError

# owner/name as the Hub allows them (letters, digits, '-', '_', '.'), no file suffix
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_NO_HUB = "or give the path of a downloaded config.json"


def is_repo_id(text: str) -> bool:
    """True for text shaped like a Hub id (an existing local path is checked first by the caller)."""
    return bool(_REPO_ID.match(text)) and not text.lower().endswith(".json")


@lru_cache(maxsize=1)
def _presets() -> dict[str, tuple[str, str]]:
    rows = read_commented_csv(data_path("hf_model_ids.csv"))
    return {r["repo_id"].strip().lower(): (r["preset"].strip(), r["source"].strip()) for r in rows}


def preset_for(repo_id: str) -> str | None:
    """The bundled preset whose architecture the Hub repo has, or None."""
    hit = _presets().get(repo_id.strip().lower())
    return hit[0] if hit else None


def fetch_config(repo_id: str) -> Path:
    """Local path of the repo's config.json: the cached copy when there is one, else downloaded once.
    One probe request first, so that no network fails in one line instead of huggingface_hub's retries."""
    try:
        import huggingface_hub as hf
        from huggingface_hub import errors as hub
    except ImportError:
        raise InputError("model", repo_id, "a Hugging Face model id needs huggingface_hub: pip install "
                         f"'gpuwise[hf]', {_NO_HUB}") from None
    try:
        return Path(hf.hf_hub_download(repo_id, "config.json", local_files_only=True))
    except hub.LocalEntryNotFoundError:
        pass
    except hub.HFValidationError:
        raise InputError("model", repo_id, f"not a valid Hugging Face repo id (owner/name), {_NO_HUB}") from None
    try:
        hf.get_hf_file_metadata(hf.hf_hub_url(repo_id, "config.json"))    # no retries
        return Path(hf.hf_hub_download(repo_id, "config.json"))
    except hub.GatedRepoError:
        fix = (f"gated repo: accept its licence on https://huggingface.co/{repo_id} and set HF_TOKEN to a "
               f"token of that account, {_NO_HUB}")
    except hub.RepositoryNotFoundError:
        fix = f"no such model repo on the Hugging Face Hub (private? set HF_TOKEN), {_NO_HUB}"
    except (hub.LocalEntryNotFoundError, hub.OfflineModeIsEnabled):
        fix = f"not in the Hugging Face cache and HF_HUB_OFFLINE is set: run once online, {_NO_HUB}"
    except hub.EntryNotFoundError:
        fix = f"the repo has no config.json (not a transformers model?), {_NO_HUB}"
    except Exception as exc:    # network, proxy, TLS, HTTP status: all mean the Hub could not be read
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:120]
        fix = f"not in the Hugging Face cache and the Hub could not be read ({why}): check the network, {_NO_HUB}"
    raise InputError("model", repo_id, fix)
