"""Hardware and software identity for the transformers engine's run header.

Reproducibility of greedy outputs is only promised on identical hardware and library versions,
so the header records the GPU, driver, CUDA, torch and transformers versions and the TF32
switches (which change float32 matrix products on NVIDIA GPUs).
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from servediff.hashing import files_sha256


def torch_device(name: str) -> str:
    """Resolve ``auto`` to ``cuda`` when a GPU is visible, else ``cpu``; check CUDA exists."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but torch sees no CUDA GPU")
    return name


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def gpu_identity(device: str) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(torch.device(device))
    cudnn: Any = torch.backends.cudnn  # its version() is unannotated
    return {
        "gpu": props.name,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "compute_capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "driver": nvidia_driver(),
        "cuda": torch.version.cuda,
        "cudnn": cudnn.version(),
    }


def software_identity(device: str) -> dict[str, Any]:
    """Versions, device and numeric switches; ``versions_line`` is a one-line summary."""
    versions = {p: _version(p) for p in ("torch", "transformers", "accelerate", "gguf", "tokenizers")}
    out: dict[str, Any] = {
        "device": device,
        "versions": versions,
        "cpu": platform.processor() or platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }
    if device.startswith("cuda"):
        out.update(gpu_identity(device))
    where = out.get("gpu") or "cpu"
    out["versions_line"] = f"transformers {versions['transformers']}, torch {versions['torch']}, {where}"
    return out


def weights_sha256(path: Path) -> str:
    """SHA-256 of a GGUF file, or of a model folder's weight files in name order."""
    files = (
        [path]
        if path.is_file()
        else sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf", ".json"))
    )
    return files_sha256(files)
