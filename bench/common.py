"""What the benchmark parts share: result rows, child processes, servers, timing.

Run everything with ``bash bench/run.sh``; each part is a module of this folder.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
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
    seconds: float  # wall time
    cpu_s: float  # the child's own user + system CPU time
    max_rss_mib: float  # the child's own peak resident memory
    stdout: str


def run_timed(argv: list[str], timeout: float = 1800.0) -> Timed:
    """Run a child to completion: wall time, and its own CPU time and peak RSS (from wait4).

    CPU time matters on a shared machine: wall time stretches with other processes' load,
    the CPU a program needs does not.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} exited {proc.returncode}: {stderr[-1500:]}")
    return Timed(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stdout)
