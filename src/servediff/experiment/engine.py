"""The HTTP engine as an experiment runs it: its identity also names the launch command, the
engine profile, the claimed features and the hash of the configuration's definition.

    servediff experiment examples/llamacpp-flash.toml
"""

from __future__ import annotations

import re
from typing import Any

from servediff.engines.openai_http import HTTPEngine, HTTPOptions
from servediff.experiment.spec import ConfigSpec

# Environment values under names like these may be credentials: recorded as redacted.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)


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
            out["launch"] = list(c.launch.argv)
            out["env"] = {k: "<redacted>" if SECRET_NAME.search(k) else v for k, v in c.launch.env}
        if self._version and not out.get("server_version"):
            out["server_version"] = self._version
        return out
