"""How a run's items are held, and all an analysis may ask of them: ``RunItems``.

    servediff compare runs/*.jsonl

A record read whole holds its items in a dict (``ItemDict``); a shadow record read lean holds the
same items as columns (``lean.LeanItems``). Both are a ``RunItems``: items by id in the order
read, and the few questions a pass over every item asks (errors, output tokens, whether any is
scored, the speed statistics' columns), each answered the fastest way its store allows. An
analysis asks these and never which store it has (a pass over every item that can read columns
asks ``lean.column_store``).
"""

from __future__ import annotations

import operator
from abc import abstractmethod
from collections.abc import Mapping
from itertools import compress, repeat

from servediff.records.columns import Columns
from servediff.records.schema import Item


class RunItems(Mapping[str, Item]):
    """A run's items by id, in the order read."""

    __slots__ = ()

    @property
    @abstractmethod
    def ids(self) -> list[str]:
        """The ids in their order: the store's own list where it keeps one (a million ids; the
        caller does not change it)."""

    @abstractmethod
    def errors(self) -> int:
        """Items that failed (an engine error)."""

    @abstractmethod
    def output_tokens(self) -> int:
        """Σ token counts of the items answered without an error (None counts 0)."""

    @abstractmethod
    def scored(self) -> bool:
        """Whether any item holds a score."""

    @abstractmethod
    def columns(self) -> Columns:
        """The speed statistics' per-item numbers, one row per item, made when asked."""


_ERROR = operator.attrgetter("error")
_N_TOKENS = operator.attrgetter("n_tokens")
_CORRECT = operator.attrgetter("correct")


class ItemDict(dict[str, Item], RunItems):
    """A record read whole: a dict of its items (the last line of an id wins, at its first place)."""

    __slots__ = ()

    @property
    def ids(self) -> list[str]:
        return list(self)

    # Each field read by one C call per item: at a million items a Python loop over them cost a
    # quarter of a second a run.
    def errors(self) -> int:
        failed = list(map(_ERROR, self.values()))
        return len(failed) - failed.count(None)

    def output_tokens(self) -> int:
        values = self.values()
        answered = map(operator.is_, map(_ERROR, values), repeat(None))
        return sum(filter(None, compress(map(_N_TOKENS, values), answered)))  # None counts 0

    def scored(self) -> bool:
        values = self.values()
        return list(map(_CORRECT, values)).count(None) != len(values)

    def columns(self) -> Columns:
        cols = Columns()
        for item in self.values():
            cols.add(item)
        return cols


def item_dict(items: Mapping[str, Item]) -> RunItems:
    """``items`` as a run's items: a store already, or a dict of them."""
    return items if isinstance(items, RunItems) else ItemDict(items)
