"""What a configuration bought: output tokens/s, requests/s and latency, from the records alone.

    servediff report runs/*.jsonl --md report.md      # the Speed section and the verdict lines

Every item of a run records its wall latency (request sent → answer back), its output tokens
and, from schema 3 on, when it finished (``finished_at``). From these:

- output tokens/s = Σ tokens / wall and requests/s = items / wall, where wall runs from the
  first request sent to the last answer back — within each stretch of work the runner recorded
  (header ``load``): a run made in several stretches (the demo's interleaved ABBA blocks, a run
  resumed after an interruption) is timed over its stretches, not over the other
  configurations' blocks or the hours between a kill and its resume. Written as
  (Σ tokens / Σ latency) × in-flight, with in-flight = Σ latency / wall the mean number of
  requests in flight (1 for a sequential run), so the interval can resample items: the
  bootstrap resamples the ratio and keeps in-flight fixed. Records without ``finished_at``
  count as sequential at concurrency 1 and have no throughput at higher concurrency.
- latency percentiles p50/p90/p99 (linear interpolation, numpy's default), each with a
  percentile-bootstrap interval over items. With few items p99 is close to the maximum.
- speedup of B against A = B's tokens/s ÷ A's, bootstrapped over the item ids both ran (paired:
  a long prompt is long under both). That interval covers item sampling only; where either side
  ran more than once the report's speedup is ``compare.reruns``', over the runs.
- an engine that batches (transformers) records each item's batch and the batch's wall time:
  its in-flight is Σ latency / Σ batch walls.
- warm-up: the first ``warmup`` items sent in each run (by start time where recorded, else in
  suite order) are left out of every number and counted; the first request pays for loading,
  caches and allocation.

- load: every record notes the machine's 1-minute load average per usable core at the start
  and end of each stretch of work (``servediff.machine``). Configurations measured under loads
  that differ by more than ``machine_load.LOAD_CHANGE`` per core, or on a machine that was oversubscribed
  (above ``OVERSUBSCRIBED``), do not get a speedup interval: the difference may be the machine's.

The bootstrap uses a seeded ``numpy.random.Generator`` (percentile method, 2,000 resamples), so
a report is reproducible to the digit. Past ``BOOT_MAX`` items (shadow traffic reaches millions)
resampling items would need 2,000 × n draws (16 GB at a million): then sums and ratios resample
``BOOT_MAX`` random groups of items instead (a cluster bootstrap, Davison & Hinkley 1997 §3.8, as
valid for a ratio of sums and a little wider), and a percentile's interval is the distribution-free
order-statistic one (Conover 1999 §3.2: ranks n·q ± 1.96·√(n·q·(1−q)), the normal approximation
of the binomial, close at these n). There a speedup also pairs the two sides' items in B's order
rather than sorting the keys (seconds at a million), so its groups differ from a sorted pairing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import cast, overload

import numpy as np

from servediff.compare.machine_load import stretches
from servediff.records import Item, Run

RESAMPLES = 2000
SEED = 20261201
PERCENTILES = (50.0, 90.0, 99.0)
BOOT_MAX = 5_000  # items resampled one by one up to here; groups of items beyond


@dataclass(frozen=True, slots=True)
class Interval:
    value: float
    low: float
    high: float


@dataclass(frozen=True, slots=True, eq=False)
class Items:
    """A run's (or a configuration's pooled runs') items, after warm-up and errors are left out,
    as columns in the order the requests were sent: one float array per measure, not one object
    per item (at a million items, building and reading per-item objects took seconds)."""

    keys: Sequence[str]  # the item ids (and suite, where runs of several suites are pooled)
    tokens: np.ndarray  # output tokens (float: the statistics are ratios of sums)
    latency: np.ndarray  # seconds, request sent → answer back
    ttft: np.ndarray  # time to first token; NaN where not measured
    itl: np.ndarray  # mean inter-token latency; NaN where not measured
    start: np.ndarray  # epoch seconds the request went out (finished_at − latency); NaN: unknown
    warmup: int  # left out as warm-up
    errors: int  # left out because the engine failed
    in_flight: float | None  # mean requests in flight; None: unknown (concurrent, no timestamps)
    # One run's (tokens, ms) by the engine's own clock, items that reported them; empty once pooled.
    engine: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))
    unique: bool = False  # each key once (one run's items)

    def __len__(self) -> int:
        return len(self.keys)


# run_items of the runs alive now: the report asks for each run's items several times (views,
# verdicts, speedups, the engine's rate), and at a million items each pass costs seconds. The run
# itself is kept with its entry, so an id is never reused while its entry exists.
_ITEMS: dict[tuple[int, int, str], tuple[Run, Items]] = {}


def run_items(run: Run, warmup: int, prefix: str = "") -> Items:
    """The run's error-free items minus the first ``warmup`` sent (computed once per run)."""
    key = (id(run), warmup, prefix)
    cached = _ITEMS.get(key)
    if cached is None or cached[0] is not run:
        if prefix:  # the same items under other keys: computed from the run once
            base = run_items(run, warmup)
            items = dataclasses.replace(base, keys=tuple(prefix + k for k in base.keys))
        else:
            items = _run_items(run, warmup)
        cached = _ITEMS[key] = (run, items)
    return cached[1]


def _run_items(run: Run, warmup: int) -> Items:
    # Made here and let go (run_items keeps what it made of them): 64 bytes an item, at a million
    # items per side the two sides' columns were the last 128 MB above 2 GiB of peak memory.
    cols = run.items.columns()
    ok = cols.array("error") == 0
    latency, finished = cols.array("latency"), cols.array("finished")
    # An import without timings has no latency at all: no speed numbers rather than 0 ms.
    found = np.flatnonzero(ok & ~np.isnan(latency))
    timed = not np.isnan(finished[found]).any()
    ids = run.items.ids
    if timed:  # by start time; a stable sort, as sorting the items themselves was
        order = found[np.argsort(finished[found] - latency[found], kind="stable")]
    else:
        rank = {item_id: n for n, item_id in enumerate(run.header.suite.item_ids)}
        ranks = np.fromiter((rank.get(ids[i], len(rank)) for i in found.tolist()), np.int64, len(found))
        order = found[np.argsort(ranks, kind="stable")]
    kept = order[warmup:]
    flight = None
    if not timed:
        values = list(run.items.values())
        flight = batched_in_flight([values[i] for i in kept.tolist()])
    n, ms = _pick(cols.array("engine_n"), kept), _pick(cols.array("engine_ms"), kept)
    reported = ~np.isnan(n)
    items = Items(
        # Picked by numpy from an object array: a million ``ids[i]`` from Python ints took 0.4 s.
        keys=Keys(ids, kept),
        tokens=cols.array("tokens")[kept],
        latency=latency[kept],
        ttft=_pick(cols.array("ttft"), kept),
        itl=_pick(cols.array("itl"), kept),
        start=(finished[kept] - latency[kept]) if timed else np.full(len(kept), np.nan),
        warmup=len(found) - len(kept),
        errors=int(len(ok) - ok.sum()),
        in_flight=None,
        engine=(n[reported], ms[reported]),
        unique=True,
    )
    if flight is None:
        flight = in_flight(items, run.header.concurrency, stretch_starts(run))
    return dataclasses.replace(items, in_flight=flight)


def stretch_starts(run: Run) -> tuple[float, ...]:
    """When each recorded stretch of work began (epoch seconds; empty in records made before
    stretches carried the time)."""
    at = (start.get("at") for start, _ in stretches(run))
    return tuple(sorted(float(t) for t in at if isinstance(t, (int, float))))


def _pick(column: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``column[rows]``; for a column of one value throughout (a lean read's column of a time
    or counter no item recorded: ``LeanItems.columns``), that value ``len(rows)`` times, as a
    view of no memory (8 MB of NaN a column at a million items, four columns a side)."""
    if column.ndim == 1 and column.strides == (0,):
        one = column[:1] if len(column) else np.float64(np.nan)
        return np.broadcast_to(one, (len(rows),))
    return cast("np.ndarray", column[rows])


class Keys(Sequence[str]):
    """A run's kept item ids, in the order sent: ``ids[rows[i]]``, each looked up when read. A
    shadow compare reads only how many there are (its speedup pairs the sides by position), and
    picking a million ids into a tuple took 0.1 s a run. ``ids``: the run's item ids in its
    record's order; ``rows``: each kept item's position there."""

    __slots__ = ("_ids", "_rows")

    def __init__(self, ids: list[str], rows: np.ndarray) -> None:
        self._ids, self._rows = ids, rows

    @property
    def ids(self) -> list[str]:
        return self._ids

    @property
    def rows(self) -> np.ndarray:
        return self._rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...

    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        if isinstance(i, slice):
            return tuple(map(self._ids.__getitem__, self._rows[i].tolist()))
        return self._ids[int(self._rows[i])]

    def __iter__(self) -> Iterator[str]:
        return map(self._ids.__getitem__, self._rows.tolist())


def batched_in_flight(items: Sequence[Item]) -> float | None:
    """For an engine that generates items in batches and records each item's batch and the
    batch's wall time (metadata["engine"]: transformers), Σ latency / Σ batch walls; else None."""
    walls: dict[object, float] = {}
    for it in items:
        meta = it.metadata.get("engine") or {}
        if "batch" not in meta or "batch_wall_s" not in meta:
            return None
        walls[meta["batch"]] = float(meta["batch_wall_s"])
    wall = sum(walls.values())
    return sum(it.latency_s or 0.0 for it in items) / wall if wall > 0 else None


BREAK_TOLERANCE_S = 0.005


def in_flight(items: Items, concurrency: int, breaks: Sequence[float] = ()) -> float | None:
    """Σ latency / wall: the mean number of requests in flight. Wall is first start → last
    finish within each stretch of work, summed; ``breaks``: when each stretch began (items sent
    before the first belong to a stretch whose record was lost, a killed run's)."""
    if not len(items):
        return None
    if np.isnan(items.start).any():
        return 1.0 if concurrency == 1 else None
    finish = items.start + items.latency
    # A stretch's time is taken just before its first request and kept to the millisecond: the
    # tolerance keeps that request from counting as the stretch before's.
    edges = np.asarray(breaks, dtype=float) - BREAK_TOLERANCE_S
    stretch = np.searchsorted(edges, items.start, side="right")
    # Each stretch's first start and last finish, in one pass whatever the number of stretches.
    order = np.argsort(stretch, kind="stable")
    cuts = np.flatnonzero(np.diff(stretch[order], prepend=-1))
    first = np.minimum.reduceat(items.start[order], cuts)
    last = np.maximum.reduceat(finish[order], cuts)
    wall = float((last - first).sum())
    busy = sum(items.latency.tolist())  # summed in order, as the reports before columns did
    return busy / wall if wall > 0 else None


def pooled(parts: Sequence[Items]) -> Items:
    """Several runs as one sample (repeats; or suites, keyed apart). In-flight: latency-weighted."""
    if len(parts) == 1:
        return parts[0]
    known = [(p.in_flight, sum(p.latency.tolist())) for p in parts if len(p)]
    flight: float | None = None
    if known and all(f is not None for f, _ in known):
        weight = sum(w for _, w in known) or float(len(known))  # all latencies 0: equal weights
        flight = sum((f or 0.0) * (w or 1.0) for f, w in known) / weight

    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts])

    return Items(
        keys=tuple(k for p in parts for k in p.keys),
        tokens=joined("tokens"),
        latency=joined("latency"),
        ttft=joined("ttft"),
        itl=joined("itl"),
        start=joined("start"),
        warmup=sum(p.warmup for p in parts),
        errors=sum(p.errors for p in parts),
        in_flight=flight,
    )


def _interval(value: float, draws: np.ndarray) -> Interval:
    low, high = np.percentile(draws, [2.5, 97.5])
    return Interval(float(value), float(low), float(high))


def _draws(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, n, size=(RESAMPLES, n))


def _grouped(cols: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per-item columns, or past BOOT_MAX items their sums over BOOT_MAX random groups: every
    statistic here is a ratio of sums, which the groups' sums give exactly."""
    if len(cols) <= BOOT_MAX:
        return cols
    group = rng.integers(0, BOOT_MAX, size=len(cols))
    sums = [np.bincount(group, weights=cols[:, j], minlength=BOOT_MAX) for j in range(cols.shape[1])]
    return np.stack(sums, axis=1)


# Resamples gathered at a time: 2,000 × 5,000 indices gathered at once made an 80 MB array per
# column, each one fresh pages from the system (most of a page fault's cost here is the kernel's);
# a block of 200 rows is 8 MB, reused from one block to the next. Each row is summed alone, so the
# sums are the same to the bit.
_BLOCK = 200


def _resampled_sums(cols: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(RESAMPLES, columns): each column's sum in each bootstrap resample of the rows.

    The draws are made a block of rows at a time too: the generator gives the same numbers in
    the same order as one (RESAMPLES, n) draw, without its 80 MB of fresh pages."""
    n = len(cols)
    out = np.empty((RESAMPLES, cols.shape[1]))
    columns = [cols[:, j].copy() for j in range(cols.shape[1])]  # contiguous: gathered 10M times
    for start in range(0, RESAMPLES, _BLOCK):
        block = rng.integers(0, n, size=(min(_BLOCK, RESAMPLES - start), n))
        for j, col in enumerate(columns):
            out[start : start + len(block), j] = col[block].sum(axis=1)
    return out


# rates and speedups of the Items alive now, by identity: the report's speed table and its
# verdicts ask for the same ones (the same cached Items), and at a million items each costs seconds.
# The Items are kept with their entry, so an id is never reused while its entry exists.
_RATES: dict[int, tuple[Items, tuple[Interval, Interval] | None]] = {}
_SPEEDUPS: dict[tuple[int, int], tuple[Items, Items, Interval | None]] = {}


def rates(items: Items) -> tuple[Interval, Interval] | None:
    """(output tokens/s, requests/s) with bootstrap intervals; None without items or in-flight."""
    cached = _RATES.get(id(items))
    if cached is None or cached[0] is not items:
        cached = _RATES[id(items)] = (items, _rates(items))
    return cached[1]


def _rates(items: Items) -> tuple[Interval, Interval] | None:
    flight, n = items.in_flight, len(items)
    if not n or flight is None:
        return None
    tokens, latency = items.tokens, items.latency
    if latency.sum() <= 0:
        return None
    rng = np.random.default_rng(SEED)
    sums = _resampled_sums(_grouped(np.column_stack([tokens, latency, np.ones(n)]), rng), rng)
    busy = sums[:, 1]
    tok = _interval(tokens.sum() / latency.sum() * flight, sums[:, 0] / busy * flight)
    req = _interval(n / latency.sum() * flight, sums[:, 2] / busy * flight)
    return tok, req


def percentiles(values: Sequence[float] | np.ndarray) -> tuple[Interval, ...]:
    """p50, p90, p99 of ``values`` with bootstrap intervals (empty: no values); past BOOT_MAX
    values, order-statistic intervals (see the module's docstring)."""
    if not len(values):
        return ()
    x = np.array(values, dtype=float)
    point = np.percentile(x, PERCENTILES)
    if len(x) > BOOT_MAX:
        return tuple(_order_interval(x, float(v), q / 100) for v, q in zip(point, PERCENTILES))
    idx = _draws(len(x), np.random.default_rng(SEED))
    draws = np.percentile(x[idx], PERCENTILES, axis=1)
    return tuple(_interval(float(point[k]), draws[k]) for k in range(len(PERCENTILES)))


def _order_interval(x: np.ndarray, value: float, q: float) -> Interval:
    n = len(x)
    half = 1.959964 * float(np.sqrt(n * q * (1 - q)))
    lo, hi = max(0, int(np.floor(n * q - half)) - 1), min(n - 1, int(np.ceil(n * q + half)) - 1)
    ends = np.partition(x, (lo, hi))
    return Interval(value, float(ends[lo]), float(ends[hi]))


def mean(values: Sequence[float] | np.ndarray) -> Interval | None:
    if not len(values):
        return None
    x = np.array(values, dtype=float)
    rng = np.random.default_rng(SEED)
    sums = _resampled_sums(_grouped(np.column_stack([x, np.ones(len(x))]), rng), rng)
    return _interval(float(x.mean()), sums[:, 0] / sums[:, 1])


def speedup(a: Items, b: Items) -> Interval | None:
    """B's output tokens/s ÷ A's over the keys both have, bootstrapped over those keys (paired).
    Repeats of one key are summed first, so a key is drawn with all its repeats."""
    cached = _SPEEDUPS.get((id(a), id(b)))
    if cached is None or cached[0] is not a or cached[1] is not b:
        cached = _SPEEDUPS[(id(a), id(b))] = (a, b, _speedup(a, b))
    return cached[2]


def _speedup(a: Items, b: Items) -> Interval | None:
    if a.in_flight is None or b.in_flight is None:
        return None
    arr = _paired(a, b)
    if not len(arr) or arr[:, 1].sum() <= 0 or arr[:, 3].sum() <= 0 or arr[:, 0].sum() <= 0:
        return None
    scale = b.in_flight / a.in_flight

    def ratio(x: np.ndarray) -> np.ndarray:
        return np.asarray((x[..., 2] / x[..., 3]) / (x[..., 0] / x[..., 1]) * scale)

    rng = np.random.default_rng(SEED)
    with np.errstate(divide="ignore", invalid="ignore"):
        draws = ratio(_resampled_sums(_grouped(arr, rng), rng))
    return _interval(float(ratio(arr.sum(axis=0))), draws[np.isfinite(draws)])


def _paired(a: Items, b: Items) -> np.ndarray:
    """(tokens A, latency A, tokens B, latency B) per key both have: in key order, or past
    BOOT_MAX keys of one run each, in B's order (sorting a million keys took seconds)."""
    if a.unique and b.unique and min(len(a), len(b)) > BOOT_MAX:
        if isinstance(a.keys, Keys) and isinstance(b.keys, Keys) and _same_order(a.keys, b.keys):
            where = np.full(len(a.keys.ids), -1, np.intp)
            where[a.keys.rows] = np.arange(len(a))
            at = where[b.keys.rows]
        else:
            rows_a = dict(zip(a.keys, range(len(a))))
            at = np.fromiter(map(rows_a.get, b.keys, repeat(-1)), np.intp, len(b))
        both = at >= 0
        at = at[both]
        return np.column_stack([a.tokens[at], a.latency[at], b.tokens[both], b.latency[both]])
    rows_a, cols_a = _per_key(a)
    rows_b, cols_b = _per_key(b)
    keys = sorted(rows_a.keys() & rows_b.keys())
    picked = [
        cols[np.fromiter(map(rows.__getitem__, keys), np.intp, len(keys))]
        for rows, cols in ((rows_a, cols_a), (rows_b, cols_b))
    ]
    return np.column_stack(picked) if keys else np.empty((0, 4))


def _same_order(a: Keys, b: Keys) -> bool:
    """Whether the two runs' records hold the same ids in the same order (positions pair keys:
    the two sides of shadow traffic). They share their id strings, so the comparison is mostly by
    identity."""
    return a.ids is b.ids or a.ids == b.ids


def _per_key(items: Items) -> tuple[dict[str, int], np.ndarray]:
    """key → its row, and the rows: (tokens, latency) summed over the key's items in order.
    One dict per side, not one per column: at a million keys each dict is ~80 MB."""
    n = len(items)
    rows = dict(zip(items.keys, range(n)))
    if len(rows) == n:  # each key once (no repeats pooled): nothing to add up
        return rows, np.column_stack([items.tokens, items.latency])
    rows = {}
    sums: list[list[float]] = []
    for key, tokens, latency in zip(items.keys, items.tokens.tolist(), items.latency.tolist()):
        row = rows.setdefault(key, len(sums))
        if row == len(sums):
            sums.append([0.0, 0.0])
        sums[row][0] += tokens
        sums[row][1] += latency
    return rows, np.array(sums, dtype=float)


def engine_decode_rate(runs: Sequence[Run], warmup: int) -> float | None:
    """Tokens/s by the engine's own clock, where it reported one, over the same items as
    ``run_items``: llama.cpp's perf counters (decoded tokens / decode time), or a server's
    ``timings`` (predicted_n / predicted_ms, llama.cpp's C++ server)."""
    n = ms = 0.0
    for run in runs:
        # In the order sent, never a set's: a set's order follows the per-process string hash, and a float sum
        # in another order can differ in its last bit from one run of the report to the next.
        tokens, millis = run_items(run, warmup).engine
        n, ms = sum(tokens.tolist(), n), sum(millis.tolist(), ms)
    return n / ms * 1000 if ms > 0 else None
