"""The key/value metadata at the head of a GGUF file, read without any inference engine.

    servediff probe RUN_A RUN_B --base-url-a URL --base-url-b URL --template model.gguf --out p.jsonl

A probe against a server renders chat prompts with the model's own template, which a GGUF
carries as ``tokenizer.chat_template``. Reading it must not need llama-cpp-python (a vLLM or
SGLang user has no reason to install it), so the header is parsed here: magic, version, tensor
and key counts, then typed key/value pairs (GGUF spec, versions 2 and 3, little-endian). Tensor
data and tensor descriptions after the metadata are never read.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

# type code → struct format of one scalar (GGUF spec: gguf_metadata_value_type)
_SCALARS: dict[int, str] = {
    0: "<B",  # uint8
    1: "<b",  # int8
    2: "<H",  # uint16
    3: "<h",  # int16
    4: "<I",  # uint32
    5: "<i",  # int32
    6: "<f",  # float32
    7: "<?",  # bool
    10: "<Q",  # uint64
    11: "<q",  # int64
    12: "<d",  # float64
}
_STRING, _ARRAY = 8, 9
# A metadata string or array longer than this is not a chat template or a vocabulary: a
# damaged or hostile file, refused before it makes us allocate gigabytes.
_MAX_ITEMS = 1 << 24


class GGUFError(ValueError):
    """Not a GGUF file, or its metadata is cut or malformed."""


def read_metadata(path: Path, keys: frozenset[str] | None = None) -> dict[str, Any]:
    """The metadata of ``path`` (only ``keys`` where given; arrays of the other keys are skipped
    by reading, not kept)."""
    with Path(path).open("rb") as f:
        if f.read(4) != b"GGUF":
            raise GGUFError(f"{path}: not a GGUF file (no GGUF magic)")
        version = _unpack(f, "<I")
        if version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {version} is not supported (2 or 3)")
        _unpack(f, "<Q")  # tensor count
        n_kv = _unpack(f, "<Q")
        out: dict[str, Any] = {}
        for _ in range(n_kv):
            key = _string(f)
            kind = _unpack(f, "<I")
            value = _value(f, kind, keep=keys is None or key in keys)
            if keys is None or key in keys:
                out[key] = value
        return out


def _unpack(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    raw = f.read(size)
    if len(raw) != size:
        raise GGUFError("the GGUF metadata ends early")
    return struct.unpack(fmt, raw)[0]


def _string(f: BinaryIO) -> str:
    n = _unpack(f, "<Q")
    if n > _MAX_ITEMS:
        raise GGUFError(f"a GGUF metadata string claims {n} bytes")
    raw = f.read(n)
    if len(raw) != n:
        raise GGUFError("the GGUF metadata ends early")
    return raw.decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int, keep: bool) -> Any:
    if kind in _SCALARS:
        return _unpack(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item_kind, n = _unpack(f, "<I"), _unpack(f, "<Q")
        if n > _MAX_ITEMS:
            raise GGUFError(f"a GGUF metadata array claims {n} items")
        if not keep and item_kind in _SCALARS:  # skipped in one seek
            f.seek(n * struct.calcsize(_SCALARS[item_kind]), 1)
            return None
        items = [_value(f, item_kind, keep) for _ in range(n)]
        return items if keep else None
    raise GGUFError(f"unknown GGUF metadata type {kind}")


def chat_template_parts(path: Path) -> tuple[str, str, str]:
    """(chat template, BOS text, EOS text) of a GGUF; the template is "" where it has none."""
    meta = read_metadata(
        path,
        frozenset(
            {
                "tokenizer.chat_template",
                "tokenizer.ggml.tokens",
                "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id",
            }
        ),
    )
    tokens = meta.get("tokenizer.ggml.tokens") or []

    def text(key: str) -> str:
        i = meta.get(key)
        return str(tokens[i]) if isinstance(i, int) and 0 <= i < len(tokens) else ""

    template = meta.get("tokenizer.chat_template")
    return (
        template if isinstance(template, str) else "",
        text("tokenizer.ggml.bos_token_id"),
        text("tokenizer.ggml.eos_token_id"),
    )
