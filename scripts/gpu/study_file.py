"""Write the GPU load study's experiment file with this machine's paths and, optionally, smaller sizes.

    python3 scripts/gpu/study_file.py examples/llama-server-gpu.toml OUT.toml

The example names the model relative to itself; here the model is wherever it was joined, and a
rehearsal on a CPU needs the same study at a tiny scale. Everything comes from the environment
(unset: the example's value), so a second call with the same environment writes the same file,
and the experiment resumes instead of starting again (a changed definition gets new run files):

    STUDY_MODEL      the GGUF (required)           STUDY_GSM8K     GSM8K test.jsonl
    STUDY_MODEL_ID   the id the server serves      STUDY_TOKENS    max_tokens, every suite capped
    STUDY_PROMPTS    limit of the 20 prompts        STUDY_PREFIX    limit of shared-prefix
    STUDY_GSM8K_N    GSM8K items                    STUDY_LEVELS    sweep concurrency, "1,2,4"
    STUDY_REPEATS    sweep repeats                  STUDY_NGL       -ngl / -ngld (0: CPU)
    STUDY_THREADS    -t / -td                       STUDY_CTX       -c (shared by the slots)
    STUDY_SLOTS      -np of the many-slot server    STUDY_ONLY      labels to keep, "stock,np32"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import tomllib

# launch flags and the variable that sets their value in every configuration
FLAGS = ((("-ngl", "-ngld"), "STUDY_NGL"), (("-t", "-td"), "STUDY_THREADS"), (("-c",), "STUDY_CTX"))


def env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


def set_flag(argv: list[str], flags: tuple[str, ...], value: object) -> None:
    for n, arg in enumerate(argv[:-1]):
        if arg in flags:
            argv[n + 1] = str(value)


def configure(raw: dict[str, Any]) -> None:
    """Apply the STUDY_* overrides to the parsed experiment, in place."""
    raw["model_path"] = str(Path(os.environ["STUDY_MODEL"]).resolve())
    raw["model"] = os.environ.get("STUDY_MODEL_ID") or raw["model"]
    suites = raw["suites"]
    if os.environ.get("STUDY_GSM8K") and "gsm8k" in suites:
        suites["gsm8k"]["path"] = str(Path(os.environ["STUDY_GSM8K"]).resolve())
    limits = {"prompts": "STUDY_PROMPTS", "shared-prefix": "STUDY_PREFIX", "gsm8k": "STUDY_GSM8K_N"}
    for name, var in limits.items():
        if name in suites and (n := env_int(var)) is not None:
            suites[name]["limit"] = n
    if (tokens := env_int("STUDY_TOKENS")) is not None:
        raw["sampling"]["max_tokens"] = tokens
        for opts in suites.values():
            opts["max_tokens"] = min(opts.get("max_tokens", tokens), tokens)
    if "sweep" not in raw:
        pass  # a study without a sweep: the sweep variables do not apply
    elif levels := os.environ.get("STUDY_LEVELS", "").strip():
        raw["sweep"]["concurrency"] = [int(c) for c in levels.split(",")]
    if "sweep" in raw and (repeats := env_int("STUDY_REPEATS")) is not None:
        raw["sweep"]["repeats"] = repeats
    if only := os.environ.get("STUDY_ONLY", "").strip():
        keep = only.split(",")
        raw["configurations"] = [c for c in raw["configurations"] if c["label"] in keep]
    swept = raw.get("sweep", {}).get("configuration")  # a study without a sweep has none
    for config in raw["configurations"]:
        argv = config["launch"]
        for flags, var in FLAGS:
            if (value := env_int(var)) is not None:
                set_flag(argv, flags, value)
        if config["label"] == swept and (slots := env_int("STUDY_SLOTS")) is not None:
            set_flag(argv, ("-np",), slots)


def value(v: Any) -> str:
    """A TOML value: JSON's strings, numbers, booleans and arrays are TOML's too."""
    return json.dumps(v, ensure_ascii=False)


def dump(raw: dict[str, Any]) -> str:
    """TOML for the shapes an experiment file has: scalars and arrays, tables, arrays of tables."""
    lines = [f"{k} = {value(v)}" for k, v in raw.items() if not isinstance(v, (dict, list)) or _array(v)]
    for key, v in raw.items():
        if isinstance(v, dict):
            lines += _table(key, v)
        elif isinstance(v, list) and not _array(v):
            for entry in v:
                lines += ["", f"[[{key}]]", *(f"{k} = {value(x)}" for k, x in entry.items())]
    return "\n".join(lines) + "\n"


def _array(v: Any) -> bool:
    return isinstance(v, list) and not any(isinstance(x, dict) for x in v)


def _table(name: str, table: dict[str, Any]) -> list[str]:
    lines = ["", f"[{name}]"]
    lines += [f"{value_key(k)} = {value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for k, v in table.items():
        if isinstance(v, dict):
            lines += _table(f"{name}.{value_key(k)}", v)
    return lines


def value_key(k: str) -> str:
    return k if k.replace("-", "").replace("_", "").isalnum() else value(k)


def main() -> int:
    if len(sys.argv) != 3 or not os.environ.get("STUDY_MODEL"):
        print("usage: STUDY_MODEL=GGUF study_file.py EXAMPLE.toml OUT.toml", file=sys.stderr)
        return 2
    raw = tomllib.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    configure(raw)
    text = dump(raw)
    assert tomllib.loads(text) == raw  # the writer kept every value
    Path(sys.argv[2]).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
