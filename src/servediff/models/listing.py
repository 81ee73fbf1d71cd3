"""What ``servediff models`` prints: a few lines per registry model, without hashing anything.

    servediff models

A file whose marker no longer vouches for it is shown as such; it is hashed when next used.
"""

from __future__ import annotations

from pathlib import Path

from servediff.models.cache import installed_file, is_verified, model_file
from servediff.models.registry import MODELS, ModelEntry


def _status(model: ModelEntry, root: Path | None) -> tuple[str, str, int]:
    """Where it is (cached, installed, or not yet), the path, and its size on disk or pinned."""
    if model.origin == "package":
        try:
            path = installed_file(model)
        except FileNotFoundError:
            return "not installed", "", model.size
        return "installed", str(path), path.stat().st_size
    path = model_file(model, root)
    if not path.is_file():
        return "not fetched", "", model.size
    # A file without a current marker is hashed again (and refused if wrong) when next used.
    state = "cached, verified" if is_verified(model, path) else "cached, re-verified on use"
    return state, str(path), model.size


def lines(root: Path | None = None) -> list[str]:
    out = []
    for model in MODELS.values():
        state, path, size = _status(model, root)
        sha = model.sha256 or "not pinned (recorded per run)"
        out += [
            f"{model.name}  ({state})",
            f"  file     {model.file}, " + (f"{size:,} bytes" if size else "size as installed"),
            f"  sha256   {sha}",
            f"  license  {model.license}",
            f"  from     {model.source}",
        ]
        if path:
            out.append(f"  path     {path}")
    return out
