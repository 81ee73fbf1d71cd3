"""One configuration served by several replicas: items are spread over them, and each item's
record says which replica answered it (``metadata.engine.replica``, an index into the header's
replica list).

    servediff experiment examples/ray-replicas.toml

Production serves a configuration from several copies behind a load balancer; spreading a
suite the same way measures what users get, and naming the replica keeps a disagreeing one
findable (the experiment's replica check compares them on a shared subset).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from servediff.engines import Engine, OnDone
from servediff.types import Completion, Sample, SamplingParams


def spread(samples: Sequence[Sample], replicas: int) -> list[list[Sample]]:
    """Round robin by position: deterministic, and every replica gets a share of every part."""
    return [list(samples[i::replicas]) for i in range(replicas)]


class ReplicaSet:
    """Engines of one configuration, used together as one engine."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        if not engines:
            raise ValueError("a replica set needs at least one engine")
        self.engines = list(engines)
        self.kind = self.engines[0].kind

    def identity(self) -> dict[str, Any]:
        # The first replica's identity stands for the configuration (the others are copies of
        # it); the count is part of it, the URLs (fresh ports) are not.
        return {**self.engines[0].identity(), "replicas": len(self.engines)}

    def generate(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        lock = threading.Lock()  # the runner's callback appends to one file

        def tagged(index: int) -> OnDone:
            def done(c: Completion) -> None:
                c.engine_meta = {**(c.engine_meta or {}), "replica": index}
                with lock:
                    on_done(c)

            return done

        errors: list[BaseException] = []

        def serve(index: int, share: list[Sample]) -> None:
            try:
                self.engines[index].generate(share, params, tagged(index))
            except BaseException as exc:  # re-raised in the caller's thread below
                errors.append(exc)

        threads = [
            threading.Thread(target=serve, args=(i, share), name=f"replica-{i}", daemon=True)
            for i, share in enumerate(spread(samples, len(self.engines)))
            if share
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def close(self) -> None:
        for engine in self.engines:
            engine.close()
