"""The vocabulary hash of a server's model file, when that file is on this machine.

An embedded run records ``vocab_sha256`` (``llamacpp.vocab_sha256``): what ``servediff compare
--checkpoints`` checks before it pairs two weight files of one model (Q4_1 against Q2_K: same
tokenizer, so the texts and token ids mean the same). A server does not expose its vocabulary,
but llama-server names its model file (``/props`` ``model_path``) and llama_cpp.server serves it
under its path; when that file is here, loading it with its vocabulary only (no weights, ~0.5 s
for 49k tokens, ~1.5 s for 151k) gives the same hash, computed by the same function.
"""

from __future__ import annotations

import functools
import stat
from pathlib import Path
from typing import Any


def served_vocab(path: str | None, n_vocab: int | None = None) -> str | None:
    """``vocab_sha256`` of the GGUF at ``path``, or None when it is not a readable GGUF on this
    machine, llama-cpp-python is not installed, or its vocabulary size is not the server's
    ``n_vocab`` (a file of the same name that is not what the server loaded)."""
    if not path:
        return None
    p = Path(path)
    try:
        st = p.stat()
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):  # a device or a pipe named by a server is not read
        return None
    got = _hash(str(p.resolve()), st.st_size, st.st_mtime_ns)
    if got is None or (n_vocab is not None and got[1] != n_vocab):
        return None
    return got[0]


@functools.lru_cache(maxsize=16)
def _hash(path: str, size: int, mtime_ns: int) -> tuple[str, int] | None:
    """(hash, vocabulary size); keyed on the file's size and mtime too, so a replaced file is read
    again, and an experiment's runs of one server read it once."""
    del size, mtime_ns  # part of the cache key only
    try:
        import llama_cpp
        from llama_cpp._utils import suppress_stdout_stderr
    except ImportError:
        return None
    from servediff.engines.llamacpp import vocab_sha256

    try:
        # llama.cpp prints its load log, and a context warning for a vocabulary-only model, on
        # the process's own stderr: kept off the user's terminal.
        with suppress_stdout_stderr(disable=False):
            llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    except (ValueError, RuntimeError, OSError):
        return None
    try:
        return vocab_sha256(llm), int(llm.n_vocab())
    finally:
        llm.close()


def local_vocab(models: Any, props: Any, model: str | None) -> str | None:
    """The served model file's vocabulary hash, when the file is here: llama-server names it in
    /props (``model_path``) and its vocabulary size in /v1/models (``meta.n_vocab``);
    llama_cpp.server serves a model under its path."""
    entries = models.get("data") if isinstance(models, dict) else None
    entry = next((m for m in entries or [] if isinstance(m, dict) and m.get("id") == model), {})
    meta: dict[str, Any] = entry["meta"] if isinstance(entry.get("meta"), dict) else {}
    n_vocab = meta["n_vocab"] if isinstance(meta.get("n_vocab"), int) else None
    path = props.get("model_path") if isinstance(props, dict) else None
    for candidate in (path, model):
        if isinstance(candidate, str) and (got := served_vocab(candidate, n_vocab)):
            return got
    return None
