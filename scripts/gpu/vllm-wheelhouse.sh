#!/usr/bin/env bash
# Build the vLLM wheelhouse for a GPU machine without a package index, where the index is reachable:
# download every wheel of scripts/gpu/vllm-wheels.txt with its SHA-256 checked, pack them into one
# tar and split it into parts of one transfer each (parts.sh split).
#
#   scripts/gpu/vllm-wheelhouse.sh DIR [PART_SIZE]    # PART_SIZE as split takes it; default 55M
#
# Writes DIR/wheels/*.whl (119 files, about 410 MB), DIR/vllm-wheels.tar, DIR/vllm-wheels.tar.sha256
# and DIR/parts/p000, p001, …: one folder per transfer, each with its part, the parts' list and the
# tar's SHA-256. Move every pNNN folder to the GPU machine, gather the parts into one folder
# (parts.sh collect), then run scripts/gpu/vllm-install.sh there. A second call reuses the wheels
# already in DIR/wheels (pip checks their hashes again) and packs them anew.
#
# pip is $PYTHON -m pip (default python3); any pip new enough for hash-checking mode (8 and later)
# downloads for CPython 3.12 whatever its own Python is.
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 DIR [PART_SIZE]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
dir=$1 size=${2:-55M}
mkdir -p "$dir/wheels"
# The platform tags admit every file of the list: pip does not widen manylinux_2_X to older glibc
# versions by itself, so each one that a pinned file carries is named (2014 implies 2010 and 1).
platforms=()
for tag in manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_26 manylinux_2_27 manylinux_2_28 manylinux_2_31; do
    platforms+=(--platform "${tag}_x86_64")
done
${PYTHON:-python3} -m pip download -q --require-hashes --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp "${platforms[@]}" \
    -r "$here/vllm-wheels.txt" -d "$dir/wheels"
want=$(grep -c -- '--hash=sha256:' "$here/vllm-wheels.txt")
got=$(find "$dir/wheels" -maxdepth 1 -name '*.whl' | wc -l)
# a wheel in DIR/wheels that the list does not pin would travel and be installed: refuse it
[ "$got" -eq "$want" ] || { echo "$dir/wheels holds $got wheels, the list pins $want: remove the others" >&2; exit 1; }
echo "$got wheels, $(du -sh "$dir/wheels" | cut -f1), every SHA-256 as listed"

# Sorted names, fixed owner and times: the same wheels give the same tar, and so the same SHA-256.
tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$dir/vllm-wheels.tar" wheels
sha=$(sha256sum "$dir/vllm-wheels.tar" | cut -d' ' -f1)
echo "$sha" > "$dir/vllm-wheels.tar.sha256"
rm -rf "$dir/parts"
bash "$here/parts.sh" split "$dir/vllm-wheels.tar" "$size" "$dir/parts"
for p in "$dir"/parts/p[0-9]*; do cp "$dir/vllm-wheels.tar.sha256" "$p/"; done
echo "vllm-wheels.tar SHA-256 $sha"
