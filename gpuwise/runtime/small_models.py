"""The small models `gpuwise run` trains on CPU slots: config files under
``gpuwise/data/runtime_models/`` read by the project's config readers and built by `gpuwise.nn`.

- transformers (``tiny-llama``): a Hugging Face config.json read by `gpuwise.workload.models.load_model`
  into a ModelSpec, built by `gpuwise.nn.build_model` (its parameter count is `param_count(spec)`);
- CNNs (``tiny-resnet``): a ResNetConfig dict, built by `gpuwise.nn.build_resnet`.

Each file's ``gpuwise`` block says what the runtime generates for it (bigram text of ``seq_len``
tokens, or template images of ``image_size`` pixels) and ``max_local_batch``, the per-slot batch
limit that stands in for GPU memory. No torch here: the controller imports this, workers build.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from gpuwise.data import data_path
from gpuwise.errors import unknown_name
from gpuwise.workload.model_spec import ModelSpec

FOLDER = "runtime_models"


@dataclass(frozen=True)
class SmallModel:
    name: str
    kind: str                     # "lm" (next-token loss on bigram text) | "image" (classes of templates)
    config: dict                  # the file's structure keys
    spec: ModelSpec | None        # transformers: what the config reader made of the file
    max_local_batch: int
    seq_len: int = 0              # lm: tokens per sample
    image_size: int = 0           # image: height = width

    @property
    def classes(self) -> int:
        """Output classes: the vocabulary of an LM, the labels of a classifier."""
        return self.spec.vocab_size if self.spec is not None else int(self.config["num_labels"])


@lru_cache(maxsize=1)
def small_models() -> dict[str, SmallModel]:
    from gpuwise.workload.models import load_model

    out = {}
    for path in sorted(data_path(FOLDER).glob("*.json")):
        cfg = json.loads(path.read_text())
        meta = cfg["gpuwise"]
        if cfg["model_type"] == "resnet":
            out[path.stem] = SmallModel(path.stem, "image", cfg, None, int(meta["max_local_batch"]),
                                        image_size=int(meta["image_size"]))
        else:
            spec = load_model(str(path))
            out[path.stem] = SmallModel(path.stem, "lm", cfg, spec, int(meta["max_local_batch"]),
                                        seq_len=min(int(meta["seq_len"]), spec.max_seq_len))
    return out


def small_model(name: str, field: str = "application") -> SmallModel:
    models = small_models()
    if name not in models:
        raise unknown_name(field, name, models)
    return models[name]
