#!/usr/bin/env bash
# Install vLLM 0.24.0 on the GPU machine, without network, from the parts of vllm-wheelhouse.sh:
#
#   scripts/gpu/parts.sh collect MOVED/p000 PARTS    # … for each part folder that was moved
#   scripts/gpu/vllm-install.sh PARTS SITE [SHA256]
#
# Joins PARTS/part.* into the tar (parts.sh join: each part and the whole checked; SHA256 defaults
# to PARTS/vllm-wheels.tar.sha256, written beside the parts), unpacks it, installs the wheels into
# SITE with every file checked against scripts/gpu/vllm-wheels.txt (no index, no dependency
# resolution: the list is complete, and vLLM's own pin of apache-tvm-ffi is the wrong one), and
# checks that vllm, numba and xgrammar import, and servediff from this checkout's src/, with SITE
# first on the path. Then it prints the two lines to use in every shell that starts a server:
#
#   export PYTHONPATH=SITE:CHECKOUT/src
#   export VLLM_USE_FLASHINFER_SAMPLER=0
#
# SITE comes first so that its numpy 2.4 shadows an image's numpy >= 2.5 (numba 0.65 refuses that).
# The image must have CUDA 13 torch 2.11.0 and transformers >= 5.5.3 (see vllm-wheels.txt).
# Exit 0: installed and importable; 1: a part or a wheel is missing or damaged; 2: usage, or the
# import check failed (one line saying what did not import). $PYTHON picks the interpreter
# (default python3, which must be CPython 3.12 like the wheels).
set -euo pipefail
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "usage: $0 PARTS_DIR SITE [SHA256]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
parts=$1 site=$2 python=${PYTHON:-python3}
sha=${3:-$(cat "$parts/vllm-wheels.tar.sha256" 2>/dev/null || true)}
[ -n "$sha" ] || { echo "no SHA-256: give it, or put vllm-wheels.tar.sha256 in $parts" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/vllm-wheels.XXXXXX")
trap 'rm -rf "$work"' EXIT

bash "$here/parts.sh" join "$parts" "$work/vllm-wheels.tar" "$sha"
tar -C "$work" -xf "$work/vllm-wheels.tar"
rm "$work/vllm-wheels.tar"  # 410 MB less on the disk while pip copies the wheels out
mkdir -p "$site"
site=$(cd "$site" && pwd)
start=$(date +%s)
# -r with the hashes rather than *.whl: pip installs exactly the listed files and checks each one.
PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 "$python" -m pip install -q --no-index --no-deps --no-compile --require-hashes \
    --find-links "$work/wheels" -r "$here/vllm-wheels.txt" --target "$site" --upgrade
echo "installed $(ls "$work"/wheels/*.whl | wc -l) wheels into $site in $(( $(date +%s) - start )) s"

path="$site:$repo/src"
# One line on failure: the first module that does not import, and why.
if ! err=$(PYTHONPATH="$path${PYTHONPATH:+:$PYTHONPATH}" "$python" -c '
from importlib.metadata import version
import numpy, numba, xgrammar, vllm, pydantic, msgspec, servediff.cli
assert numpy.__version__.startswith("2.4."), f"numpy {numpy.__version__} comes first on the path, not 2.4.x"
print(", ".join(f"{m} {version(m)}" for m in ("vllm", "numba", "numpy", "xgrammar", "apache-tvm-ffi")))
' 2>&1); then
    echo "the import check failed with SITE first on the path: $(echo "$err" | grep -v '^ ' | tail -1)" >&2
    exit 2
fi
echo "$err"
echo "export PYTHONPATH=$path\${PYTHONPATH:+:\$PYTHONPATH}"
echo "export VLLM_USE_FLASHINFER_SAMPLER=0"
