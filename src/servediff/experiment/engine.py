"""The HTTP engine as an experiment runs it: its identity also names the launch command, the
engine profile, the claimed features and the hash of the configuration's definition.

    servediff experiment examples/llamacpp-flash.toml
"""

from __future__ import annotations

from typing import Any

from servediff.engines.openai_http import HTTPEngine, HTTPOptions
from servediff.experiment.spec import ConfigSpec
from servediff.redaction import redact_argv, redact_env


class ExperimentHTTPEngine(HTTPEngine):
    def __init__(self, options: HTTPOptions, label: str, config: ConfigSpec, version: str | None) -> None:
        super().__init__(options, label=label)
        self._config = config
        self._version = version

    def identity(self) -> dict[str, Any]:
        out = super().identity()
        c = self._config
        out.update(profile=c.profile, claims=list(c.claims), definition_sha256=c.digest)
        if c.launch is not None:
            # The argv as written ({port} unsubstituted): a fresh port is not a new configuration.
            # Credentials in it (--api-key X, HF_TOKEN=X) and in its environment stay off disk.
            out["launch"] = redact_argv(c.launch.argv)
            out["env"] = redact_env(c.launch.env)
        if self._version and not out.get("server_version"):
            out["server_version"] = self._version
        return out
