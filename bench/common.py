"""What the benchmark parts share: result rows, child processes, servers, timing.

Run everything with ``bash bench/run.sh``; each part is a module of this folder.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PYTHON = sys.executable  # the servediff environment (the one running this driver)
BENCH_PYTHON = str(BENCH / ".venv" / "bin" / "python")  # lm-eval, httpx, uvloop for the stub


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the results table."""

    part: str
    what: str
    measured: str
    target: str = ""
    met: bool | None = None  # None: no target on this line


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    """Wait until GET ``url`` answers 200, or fail if the process died or time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout:g} s")


class Server:
    """A child server process, stopped (by its own pid) when the ``with`` block ends."""

    def __init__(self, argv: list[str], health_path: str, log_path: Path, port: int) -> None:
        self.base_url = f"http://127.0.0.1:{port}"
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            wait_http(self.base_url + health_path, self.proc)
        except RuntimeError:
            self.stop()
            raise RuntimeError(f"{argv[:4]} failed; see {log_path}") from None

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@dataclass(frozen=True, slots=True)
class Timed:
    seconds: float
    max_rss_mib: float  # 0 where not measured
    stdout: str


def run_timed(argv: list[str], timeout: float = 900.0, env: dict[str, str] | None = None) -> Timed:
    """Run a child to completion: its wall time and stdout (stderr is shown only on failure)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env={**os.environ, **(env or {})}
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"{argv[:3]} ran past {timeout:g} s") from None
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} exited {proc.returncode}: {err.decode()[-1500:]}")
    return Timed(seconds, 0.0, out.decode())


def run_peak(argv: list[str], stdout: Path) -> Timed:
    """Run a child writing stdout to a file; wall time and the child's own peak RSS (wait4)."""
    with stdout.open("wb") as f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.PIPE, cwd=ROOT)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} exited {proc.returncode}: {err.decode()[-1500:]}")
    return Timed(seconds, usage.ru_maxrss / 1024, "")
