"""The one place engines and probers are built, for the CLI and for experiments alike.

    servediff run --config tuned --out runs/b.jsonl            # an EngineSpec from flags
    servediff experiment examples/llamacpp-flash.toml          # an EngineSpec per configuration
    servediff probe runs/a.jsonl runs/b.jsonl --out probes.jsonl

A configuration is described by an ``EngineSpec`` (which kind, its knobs or server, its label);
``make_engine`` and ``make_prober`` turn it into a live engine. Engine modules are imported only
when that kind is built: transformers and torch take seconds to import, llama.cpp loads a
native library, and most commands need neither.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servediff.engines.knobs import LlamaKnobs, knobs_from_mapping, resolve_config
from servediff.engines.openai_http import HTTPOptions

if TYPE_CHECKING:
    from servediff.engines import Engine, Prober
    from servediff.engines.hf import HFEngine
    from servediff.engines.hf_knobs import HFKnobs
    from servediff.engines.http_scorer import ScoreOptions
    from servediff.engines.llamacpp import LlamaCppEngine
    from servediff.engines.openai_http import HTTPEngine
    from servediff.engines.template import ChatTemplate, ServerTemplate
    from servediff.records import Run

KINDS = ("llamacpp", "hf", "http")


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One engine configuration. Exactly the field of its kind is set: ``llama`` (embedded
    llama.cpp), ``hf`` (in-process transformers) or ``http`` (an OpenAI-compatible server)."""

    label: str
    llama: LlamaKnobs | None = None
    hf: HFKnobs | None = None
    http: HTTPOptions | None = None
    model_path: Path | None = None  # the in-process kinds' weights (default: SmolLM2 GGUF)
    # Added to an HTTP engine's identity (an experiment's launch command, profile, claims).
    annotations: Mapping[str, Any] = field(default_factory=dict)
    server_version: str | None = None  # recorded when the server itself exposes none
    # Teacher-forced scoring instead of generation (in-process engines, or a server's API).
    scoring: bool = False
    score: ScoreOptions | None = None  # how a server scores (HTTP scoring runs)

    @property
    def kind(self) -> str:
        return "llamacpp" if self.llama else "hf" if self.hf else "http"

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.llama, self.hf, self.http)) != 1:
            raise ValueError(f"{self.label}: an engine is one of llama knobs, hf knobs or an HTTP server")


def make_engine(spec: EngineSpec) -> Engine:
    """A fresh engine: a repeat must not inherit the previous run's KV state."""
    if spec.scoring and spec.http is not None:
        from servediff.engines.http_scorer import HTTPScorer, ScoreOptions

        return HTTPScorer(
            spec.http, spec.score or ScoreOptions(), spec.label, spec.annotations, spec.server_version
        )
    return _http(spec) if spec.http is not None else _in_process(spec)


def make_prober(
    spec: EngineSpec, template: ChatTemplate | ServerTemplate | None = None, replay: bool = False
) -> Prober:
    """An engine that answers probes as this configuration. In-process engines replay the
    prefix exactly as generation did; a server is asked through our rendering of the prompt
    (``template``), in one pass or token by token (``replay``)."""
    if spec.http is None:
        return _in_process(spec)
    if spec.annotations.get("profile") == "llama-server":
        # llama-server templates and tokenizes for itself: no template file is needed
        from servediff.engines.llama_server_probe import NativeProber

        return NativeProber(_http(spec), replay=replay)
    from servediff.engines.template import TemplateProber

    return TemplateProber(_http(spec), template, replay=replay)


def _in_process(spec: EngineSpec) -> LlamaCppEngine | HFEngine:
    if spec.llama is not None:
        from servediff.engines.llamacpp import LlamaCppEngine

        return LlamaCppEngine(spec.llama, model_path=spec.model_path, label=spec.label, scoring=spec.scoring)
    from servediff.engines.hf import HFEngine

    assert spec.hf is not None
    return HFEngine(spec.hf, model_path=spec.model_path, label=spec.label, scoring=spec.scoring)


def _http(spec: EngineSpec) -> HTTPEngine:
    from servediff.engines.openai_http import HTTPEngine

    assert spec.http is not None
    return HTTPEngine(
        spec.http, label=spec.label, annotations=spec.annotations, server_version=spec.server_version
    )


def llama_knobs(config: str, config_file: Path | None, overrides: Mapping[str, Any]) -> LlamaKnobs:
    """A named knob set (built in, or from a TOML file) with single knobs overridden; an
    override of None leaves the named value."""
    knobs = resolve_config(config, config_file)
    return dataclasses.replace(knobs, **{k: v for k, v in overrides.items() if v is not None})


def header_knobs(run: Run) -> LlamaKnobs:
    """The knobs an embedded run recorded in its header, to rebuild its engine."""
    return knobs_from_mapping(dict(run.header.engine.get("knobs") or {}), f"{run.path} header")


@dataclass(frozen=True, slots=True)
class ProbeTargets:
    """Where the two configurations of a pair answer probes: servers (both base URLs), or the
    embedded engines rebuilt from the runs' headers (neither)."""

    base_urls: tuple[str, str] | None = None
    template: Path | None = None  # chat template for servers' chat prompts
    replay: bool = False
    model_path: Path | None = None  # the embedded runs' GGUF


def run_probers(runs: tuple[Run, Run], targets: ProbeTargets) -> tuple[tuple[Prober, Prober], str | None]:
    """Probers for the two runs of a pair, and the chat template's source (servers only)."""
    if targets.base_urls is not None:
        from servediff.engines.template import ServerTemplate, load_template

        # Without a template file the server renders the chat prompt itself (vLLM's /tokenize
        # with messages): what it did for the run, with no other engine installed.
        tpl = load_template(targets.template) if targets.template else ServerTemplate()
        pa, pb = (
            make_prober(EngineSpec(r.label, http=HTTPOptions(base_url=u)), tpl, targets.replay)
            for u, r in zip(targets.base_urls, runs)
        )
        chat = any(isinstance(i.input, list) for i in runs[0].items.values())
        return (pa, pb), (tpl.source if chat or targets.template else None)
    probers = []
    for run in runs:
        if run.header.engine.get("kind") != "llamacpp":
            raise ValueError(f"{run.path} is not an embedded run: give --base-url-a/--base-url-b")
        prober = make_prober(EngineSpec(run.label, llama=header_knobs(run), model_path=targets.model_path))
        if prober.identity()["model_sha256"] != run.header.engine.get("model_sha256"):
            raise ValueError(f"{run.path} was run with another model file; pass --model-path")
        probers.append(prober)
    return (probers[0], probers[1]), None
