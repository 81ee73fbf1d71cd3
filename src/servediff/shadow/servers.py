"""The experiment form of a shadow session: both servers launched from an experiment file.

    servediff shadow --experiment examples/shadow-llamacpp.toml --listen 127.0.0.1:9000 --out shadow/

The primary is the experiment's control configuration and the candidate its other configuration
(``--candidate-config LABEL`` picks one where there are several); both must be launched
configurations. Each server starts as an experiment starts it (``experiment.lifecycle``): its
own process group, the health gate, the model it serves checked, killed by the kernel should
servediff die, listed in ``OUT/servers/`` while it runs (a later session ends what a killed one
left behind), its output in ``OUT/logs/``. Both are stopped when the session ends: Ctrl-C,
SIGTERM, or an error while the other one starts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servediff.experiment.conductor import sigterm_as_interrupt
from servediff.experiment.ledger import end_survivors
from servediff.experiment.lifecycle import RunningServer, launched
from servediff.experiment.session import LEDGER, placeholders, say
from servediff.experiment.source import ExperimentError
from servediff.experiment.spec import ConfigSpec, Experiment
from servediff.filename import file_stem
from servediff.redaction import redact_argv


@dataclass(frozen=True, slots=True)
class Launched:
    """One side of the session: the configuration and the server it runs on."""

    config: ConfigSpec
    server: RunningServer

    def identity(self) -> dict[str, Any]:
        """What the records say of the side besides its URL: the label and how it was started."""
        s = self.server
        return {"label": self.config.label, "launch": redact_argv(s.argv), "server_version": s.version}


def sides(exp: Experiment, candidate: str | None) -> tuple[ConfigSpec, ConfigSpec]:
    """(primary, candidate): the control, and the other configuration or the one named."""
    by = {c.label: c for c in exp.configurations}
    others = [label for label in by if label != exp.control]
    if candidate is None and len(others) != 1:
        raise ExperimentError(
            f"{exp.path}: {len(others)} configurations besides the control {exp.control!r}; "
            f"name the candidate with --candidate-config ({', '.join(others)})"
        )
    chosen = candidate if candidate is not None else others[0]
    if chosen not in others:
        raise ExperimentError(
            f"{exp.path}: --candidate-config {chosen!r} is not a configuration besides the control "
            f"{exp.control!r} ({', '.join(others) or 'none'})"
        )
    pair = (by[exp.control], by[chosen])
    for c in pair:
        if c.launch is None:
            raise ExperimentError(
                f"{exp.path}: configuration {c.label!r} has no launch command; a shadow session "
                "launches both servers"
            )
    return pair


@contextmanager
def launched_pair(exp: Experiment, out: Path, candidate: str | None) -> Iterator[tuple[Launched, Launched]]:
    """Both servers up and healthy; both stopped on leaving, however that happens."""
    primary, other = sides(exp, candidate)
    out.mkdir(parents=True, exist_ok=True)
    for line in end_survivors(out / LEDGER):
        say(f"warning: {line}")
    with sigterm_as_interrupt(), ExitStack() as stack:
        up = [Launched(c, stack.enter_context(_server(exp, c, out))) for c in (primary, other)]
        yield up[0], up[1]
    say("shadow: both servers stopped")


@contextmanager
def _server(exp: Experiment, config: ConfigSpec, out: Path) -> Iterator[RunningServer]:
    assert config.launch is not None  # sides() checked
    log = out / "logs" / f"{file_stem(config.label)}.log"
    say(f"[{config.label}] starting: {' '.join(redact_argv(config.launch.argv))}")
    # The kernel's parent-death signal follows the thread that started the server.
    orphan_proof = threading.current_thread() is threading.main_thread()
    values = placeholders(exp, config)
    with launched(config, log, exp.model, values, orphan_proof, out / LEDGER) as server:
        say(f"[{config.label}] healthy after {server.startup_s:.1f} s on {server.base_url}; log {log}")
        yield server
