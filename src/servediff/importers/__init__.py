"""Turn other tools' evaluation logs into servediff run records, so compare and report work on them.

    servediff import lm-eval stock/samples_gsm8k_*.jsonl tuned/samples_gsm8k_*.jsonl \\
        --label stock --label tuned --out runs/
    servediff import inspect logs/stock.json --label stock --out runs/stock.jsonl

``IMPORTERS`` maps a source name to its reader (path, options → ``Imported``). Several files
imported in one command must pair item by item (same task, same documents) and be set up alike
(prompt template or solver, filter or scorer, sampling); otherwise nothing is written and the
command exits 2, unless ``--force``. The header's ``extra.imported_from`` says which tool and
version wrote the log and what was picked from it; ``engine`` says where the model was served.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servediff.importers import inspect, lm_eval
from servediff.importers.imported import (
    Imported,
    ImportOptions,
    LogImportError,
    check_target,
    numbered,
    outputs,
    pairing_problems,
    write,
)


def _lm_eval(path: Path, o: ImportOptions) -> list[Imported]:
    return [lm_eval.read(path, o)]


IMPORTERS: dict[str, Callable[[Path, ImportOptions], list[Imported]]] = {
    "lm-eval": _lm_eval,
    "inspect": inspect.read,
}

__all__ = [
    "IMPORTERS",
    "ImportOptions",
    "Imported",
    "LogImportError",
    "check_target",
    "numbered",
    "outputs",
    "pairing_problems",
    "write",
]
