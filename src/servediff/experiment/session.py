"""A configuration's engine while it is up: launched servers (one per replica) or an in-process
engine, the engines and probers made for its runs, and the counters read around each run to
verify what the configuration claims. The conductor opens one session per configuration, locally
or on a cluster worker."""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servediff.engines import Engine, Prober
from servediff.engines.factory import EngineSpec, make_engine, make_prober
from servediff.engines.llama_server import ServerState, read_state
from servediff.engines.llama_server_checks import verify as verify_llama_server
from servediff.engines.openai_http import HTTPOptions
from servediff.engines.profiles import PROFILES, Snapshot, flagged, verify_claims, vllm_snapshot
from servediff.engines.replicas import ReplicaSet
from servediff.experiment.engine import engine_spec
from servediff.experiment.lifecycle import Placeholders, RunningServer, get_text, launched
from servediff.experiment.placement import placed
from servediff.experiment.plan import Slot
from servediff.experiment.source import ExperimentError
from servediff.experiment.spec import ConfigSpec, Experiment
from servediff.filename import file_stem
from servediff.records import read_run
from servediff.redaction import redact_argv
from servediff.runner import RunResult

if TYPE_CHECKING:
    from servediff.engines.template import ChatTemplate, ServerTemplate


LEDGER = "servers"  # the output folder's list of servers that are up (experiment.ledger)


def say(message: str) -> None:
    """A progress line of the experiment, on stderr (stdout is left to the report summary)."""
    print(message, file=sys.stderr, flush=True)


class Session:
    """A configuration's engine while it is up: makes engines, reads counters."""

    def __init__(self, exp: Experiment, config: ConfigSpec, servers: Sequence[RunningServer] = ()) -> None:
        self.exp, self.config, self.servers = exp, config, tuple(servers)
        self.server = self.servers[0] if self.servers else None
        given = config.base_urls or ((config.base_url,) if config.base_url else ())
        self.base_urls = tuple(s.base_url for s in self.servers) or given
        self.base_url = self.base_urls[0] if self.base_urls else None

    def engine(self, slot: Slot) -> Engine:
        if len(self.base_urls) > 1:  # items spread over the replicas, each item names its own
            return ReplicaSet(self.replica_engines(slot))
        return make_engine(self._spec(slot))

    def replica_engines(self, slot: Slot) -> list[Engine]:
        return [make_engine(self._spec(slot, url)) for url in self.base_urls]

    def prober(self, slot: Slot, points: list[Any]) -> tuple[Prober, str | None]:
        """An engine that answers probes as this configuration: (prober, template source)."""
        if self.config.kind == "embedded":
            # in-process: replays the prefix exactly as generation did
            return make_prober(self._spec(slot)), None
        template: ChatTemplate | ServerTemplate | None = None
        native = self.config.profile == "llama-server"  # the server applies its own template
        if not native and any(isinstance(item.input, list) for _, item, _ in points):
            if renders_chat(self.exp, self.config):
                from servediff.engines.template import ServerTemplate

                template = ServerTemplate()
            else:
                template = chat_template(template_path(self.exp, self.config))
        replay = self.exp.probes.replay
        if replay is None:
            # llama.cpp servers reuse the previous request's KV cache, so a replayed prefix is
            # evaluated one token per step as in generation; elsewhere a one-pass estimate.
            replay = self.config.profile in ("llamacpp", "llama-server")
        return make_prober(self._spec(slot), template, replay), template.source if template else None

    def _spec(self, slot: Slot, base_url: str | None = None) -> EngineSpec:
        http = None
        url = base_url or self.base_url
        if url is not None:
            http = HTTPOptions(
                base_url=url, model=self.exp.model, concurrency=slot.concurrency, send=self.config.send
            )
        version = self.server.version if self.server else None
        weights = self.config.model_path or self.exp.model_path  # a declared checkpoint's own file
        return engine_spec(self.config, slot.label, weights, http, version)

    def snapshot(self) -> Snapshot | ServerState | None:
        """The engine's counters now; None where the engine exports none servediff reads."""
        profile = PROFILES.get(self.config.profile)
        if self.base_url is not None and self.config.profile == "llama-server":
            return read_state(self.base_url)
        if self.base_url is None or profile is None or profile.metrics_path is None:
            return None
        if self.config.profile != "vllm":
            return None
        status, text = get_text(f"{self.base_url}{profile.metrics_path}")
        return vllm_snapshot(text) if status == 200 else None

    def verification(
        self,
        before: Snapshot | ServerState | None,
        after: Snapshot | ServerState | None,
        result: RunResult,
        slot: Slot,
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if isinstance(before, ServerState) or isinstance(after, ServerState):
            states = (_state(before), _state(after))
            timings = [i.metadata.get("engine_timings") for i in read_run(slot.path).items.values()]
            checks = verify_llama_server(self.config.claims, *states, timings, slot.concurrency)
            read = states[0] is not None and states[0].n_decode is not None
            extra["server_knobs"] = states[0].props if states[0] is not None else {}
        else:
            checks = verify_claims(self.config.profile, self.config.claims, _snap(before), _snap(after))
            read = before is not None
        out: dict[str, Any] = {
            "profile": self.config.profile,
            "kind": self.config.kind,
            "claims": checks,
            "flagged": flagged(checks),
            "metrics": "read" if read else "not available",
            **extra,
            "covers": "whole run"
            if result.skipped == 0
            else f"resumed part ({result.total - result.skipped} items)",
        }
        if self.server is not None:
            out.update(
                served=list(self.server.served),
                server_version=self.server.version,
                startup_s=round(self.server.startup_s, 2),
                log=str(self.server.log.relative_to(self.exp.output)),
                pid=self.server.pid,
            )
        elif self.config.kind == "embedded":
            out["served"] = ["in-process"]
        if len(self.base_urls) > 1:
            out["replicas"] = list(self.base_urls)
        return out


def _state(value: Snapshot | ServerState | None) -> ServerState | None:
    return value if isinstance(value, ServerState) else None


def _snap(value: Snapshot | ServerState | None) -> Snapshot | None:
    return value if isinstance(value, Snapshot) else None


@contextmanager
def session(exp: Experiment, config: ConfigSpec) -> Iterator[Session]:
    if config.launch is None:
        yield Session(exp, config)
        return
    with ExitStack() as stack:
        servers = [stack.enter_context(_replica(exp, config, n)) for n in range(config.replicas)]
        yield Session(exp, config, servers)
    say(f"[{config.label}] stopped")


@contextmanager
def _replica(exp: Experiment, config: ConfigSpec, n: int) -> Iterator[RunningServer]:
    """One launched copy of the configuration (replica 0 keeps the log name of a single server)."""
    assert config.launch is not None
    log = exp.output / "logs" / f"{file_stem(config.label)}.{config.digest}{f'.rep{n}' if n else ''}.log"
    say(f"[{config.label}] starting: {' '.join(redact_argv(config.launch.argv))}")
    # The server must not outlive the experiment, or a cluster worker, that is killed. The
    # kernel's signal follows the thread that started the server: only the main thread, or a
    # cluster worker's, lives as long as the server must.
    orphan_proof = placed() is not None or threading.current_thread() is threading.main_thread()
    values = placeholders(exp, config)
    with launched(config, log, exp.model, values, orphan_proof, exp.output / LEDGER) as server:
        say(
            f"[{config.label}] healthy after {server.startup_s:.1f} s on port {server.port}, serves "
            f"{list(server.served)}, version {server.version or 'not exposed'}; log {log}"
        )
        yield server


def placeholders(exp: Experiment, config: ConfigSpec) -> Placeholders:
    """What a launch line's placeholders become: the served model id and the file it loads."""
    model_path = str(exp.model_path) if exp.model_path else _default_model_path_or_empty(config)
    return Placeholders(exp.model, model_path)


# Servers that render chat messages into token ids on request (vLLM's /tokenize with messages):
# their probes need no template file.
SERVER_RENDERED = ("vllm",)


def renders_chat(exp: Experiment, config: ConfigSpec) -> bool:
    """Whether the probes of this configuration's chat prompts ask the server to render them
    (a template named in [probes] is used where given)."""
    return exp.probes.template is None and config.profile in SERVER_RENDERED


def template_path(exp: Experiment, config: ConfigSpec) -> Path | None:
    """Where a server configuration's chat template comes from, for probes of chat items: the
    file in [probes], else the GGUF the experiment (or the launched server) loads."""
    if exp.probes.template is not None:
        return exp.probes.template
    if exp.model_path is not None and exp.model_path.suffix == ".gguf":
        return exp.model_path
    found = _default_model_path_or_empty(config)
    return Path(found) if found else None


@functools.lru_cache(maxsize=4)
def chat_template(path: Path | None) -> ChatTemplate:
    from servediff.engines.template import load_template

    if path is None:
        raise ExperimentError(
            "probes of chat prompts on a server need a chat template: set [probes] template"
        )
    return load_template(path)


def _default_model_path_or_empty(config: ConfigSpec) -> str:
    if config.launch is None or not any("{model_path}" in a for a in config.launch.argv):
        return ""
    from servediff.engines.knobs import default_model_path

    return str(default_model_path())
