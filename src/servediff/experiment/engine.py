"""An experiment configuration as an engine: what the factory is asked to build, and what the
record's identity adds for a server (the launch command, the engine profile, the claimed features
and the hash of the configuration's definition).

    servediff experiment examples/llamacpp-flash.toml
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servediff.engines.factory import EngineSpec
from servediff.engines.openai_http import HTTPOptions
from servediff.experiment.spec import ConfigSpec
from servediff.redaction import redact_argv, redact_env


def engine_spec(
    config: ConfigSpec,
    label: str,
    model_path: Path | None,
    http: HTTPOptions | None,
    server_version: str | None = None,
) -> EngineSpec:
    """The configuration as the engine factory takes it; ``http`` for a server configuration."""
    if config.knobs is not None or config.hf is not None:
        return EngineSpec(label, llama=config.knobs, hf=config.hf, model_path=model_path)
    if http is None:
        raise ValueError(f"{label}: no server to talk to")
    return EngineSpec(
        label, http=http, annotations=identity_annotations(config), server_version=server_version
    )


def identity_annotations(config: ConfigSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "profile": config.profile,
        "claims": list(config.claims),
        "definition_sha256": config.digest,
    }
    if config.launch is not None:
        # The argv as written ({port} unsubstituted): a fresh port is not a new configuration.
        # Credentials in it (--api-key X, HF_TOKEN=X) and in its environment stay off disk.
        out["launch"] = redact_argv(config.launch.argv)
        out["env"] = redact_env(config.launch.env)
    return out
