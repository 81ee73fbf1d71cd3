#!/usr/bin/env bash
# Download the wheels servediff needs on a Python 3.12 Linux x86-64 machine that has the rest of its
# dependencies (aiohttp, jinja2, numpy, scipy, matplotlib, tqdm, uvloop) but no package index:
# pydantic and what it depends on, and msgspec (the record's item decoder). Binary wheels only, for CPython 3.12 manylinux.
#
#   scripts/gpu/wheels.sh DIR                  # here, where the package index is reachable
#   # there, without network: unpack them into a folder on PYTHONPATH (servediff needs no install;
#   # a wheel is a zip of the installed files, so no pip is needed either)
#   for w in DIR/*.whl; do python3 -m zipfile -e "$w" "$HOME/sd-wheels"; done
#   export PYTHONPATH="$PWD/src:$HOME/sd-wheels"
#
# llama-cpp-python is not needed there: the HTTP path never imports it (only embedded runs do).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
pip=(${PYTHON:-python3} -m pip)
# pip resolves pydantic's dependencies for that platform (pydantic pins pydantic-core exactly).
"${pip[@]}" download --dest "$1" --python-version 3.12 --implementation cp --abi cp312 --only-binary=:all: \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    "pydantic>=2.5${PYDANTIC_VERSION:+,==$PYDANTIC_VERSION}" "msgspec>=0.18" -q
ls -l "$1"/*.whl
