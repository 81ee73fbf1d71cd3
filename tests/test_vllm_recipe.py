"""The vLLM recipe's wheel side (scripts/gpu/vllm-wheels.txt, vllm-install.sh, parts.sh): the list
pins every wheel by hash, and the install refuses parts or wheels that are not the listed ones
before anything lands in its target folder. (The real download and install are rehearsed by
scripts/gpu/vllm-rehearse.sh; they need the package index, or the GPU machine.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.helpers.wheels import data_wheel

GPU = Path(__file__).resolve().parent.parent / "scripts" / "gpu"


def _wheel_list() -> list[tuple[str, str, list[str]]]:
    """(name, version, hashes) of every requirement of vllm-wheels.txt, continuations joined."""
    text = (GPU / "vllm-wheels.txt").read_text(encoding="utf-8")
    lines = [
        line for line in text.replace("\\\n", " ").splitlines() if line.strip() and not line.startswith("#")
    ]
    out = []
    for line in lines:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)\s*", line)
        assert m, f"not a pinned requirement with a hash: {line!r}"
        out.append((m[1], m[2], re.findall(r"sha256:([0-9a-f]{64})", m[3])))
    return out


def test_the_wheel_list_pins_every_wheel_by_hash_and_leaves_the_image_alone() -> None:
    wheels = _wheel_list()
    names = {re.sub(r"[-_.]+", "-", n).lower(): v for n, v, _ in wheels}
    assert len(wheels) == len(names) == 119
    assert all(len(h) == 1 for _, _, h in wheels)  # one file per pin: the one that was checked
    # the release whose pins are torch 2.11.0, and the pins of the three traps
    assert names["vllm"] == "0.24.0" and names["xgrammar"] == "0.2.8" and names["apache-tvm-ffi"] == "0.1.11"
    assert names["numpy"].startswith("2.4.") and names["numba"] == "0.65.0"
    assert {"pydantic", "msgspec", "aiohttp", "gguf"} <= names.keys()  # servediff's own, the converter's
    assert "loguru" in names  # the GPU image lacks it, and --quantization fp8 imports it
    # what the image has, or what vLLM runs without, must not travel (nor shadow the image's)
    for left_out in ("torch", "transformers", "tokenizers", "safetensors", "flashinfer-python", "triton"):
        assert left_out not in names


def _sh(*argv: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def _parts(tmp_path: Path, wheels: dict[str, bytes]) -> tuple[Path, str]:
    """A tar of wheels/NAME split as vllm-wheelhouse.sh splits it, gathered as on the GPU machine."""
    house = tmp_path / "house"
    (house / "wheels").mkdir(parents=True)
    for name, data in wheels.items():
        (house / "wheels" / name).write_bytes(data)
    with tarfile.open(house / "vllm-wheels.tar", "w") as tar:
        tar.add(house / "wheels", arcname="wheels")
    done = _sh(GPU / "parts.sh", "split", house / "vllm-wheels.tar", "4096", house / "parts")
    assert done.returncode == 0, done.stderr
    sha = done.stdout.split("SHA-256 ")[-1].strip()
    for p in (house / "parts").glob("p[0-9]*"):
        (p / "vllm-wheels.tar.sha256").write_text(sha + "\n")
        assert _sh(GPU / "parts.sh", "collect", p, tmp_path / "moved").returncode == 0
    return tmp_path / "moved", sha


def test_collect_brings_the_whole_files_hash_and_install_refuses_a_damaged_part(tmp_path: Path) -> None:
    moved, sha = _parts(tmp_path, {"a-1.0-py3-none-any.whl": os.urandom(20000)})
    assert (moved / "vllm-wheels.tar.sha256").read_text().strip() == sha  # travels with the parts
    part = sorted(moved.glob("part.*"))[1]
    part.write_bytes(part.read_bytes()[:-1] + b"\0")
    site = tmp_path / "site"
    done = _sh(GPU / "vllm-install.sh", moved, site)
    assert done.returncode == 1 and "missing or damaged" in done.stderr
    assert not site.exists()


def test_install_takes_only_the_listed_wheels(tmp_path: Path) -> None:
    # Intact parts of a tar holding a valid wheel of a listed name and version that is not the
    # listed file: installing *.whl would take it; the list, every file checked, takes nothing.
    wheel = data_wheel(tmp_path, "sniffio", "1.3.1", {"sniffio/__init__.py": b"STAND_IN = True\n"})
    moved, _ = _parts(tmp_path, {wheel.name: wheel.read_bytes()})
    site = tmp_path / "site"
    done = _sh(GPU / "vllm-install.sh", moved, site, env={"PYTHON": sys.executable})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SHA-256 verified" in done.stdout  # the parts were fine; the wheels were not
    assert not any(site.iterdir())
    assert "export PYTHONPATH" not in done.stdout


def test_install_without_a_hash_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "parts").mkdir()
    done = _sh(GPU / "vllm-install.sh", tmp_path / "parts", tmp_path / "site")
    assert done.returncode == 2 and "no SHA-256" in done.stderr
