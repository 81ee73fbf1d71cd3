"""Shadow traffic into run records: two files per segment (primary, candidate), rotated by size.

    servediff shadow ... --out shadow/ --rotate-mb 512
    servediff compare shadow/primary-0001.jsonl shadow/candidate-0001.jsonl

Each segment is a pair of ordinary run records, so ``servediff compare`` reads them like any run
pair. Traffic has no suite known in advance: the header's ``suite.item_ids`` is empty and
``extra.shadow`` says so, and compare takes the items as they come. Each segment is its own
suite (``shadow-0001``, …) so that several segments given to one compare pair up by segment.
Per-request sampling parameters vary, so the header's sampling block is the same placeholder on
both sides and the parameters as sent sit in each item's metadata.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from servediff.compare.divergence import first_difference
from servediff.records import SuiteInfo, item_line, make_header, make_item
from servediff.shadow.request import Mirrored
from servediff.types import Completion, SamplingParams

Side = Literal["primary", "candidate"]
SIDES: tuple[Side, Side] = ("primary", "candidate")


# Where two answers part, as one tokenizer splits both: (token index, the primary's token id
# there, the candidate's), None for an answer that ends there.
FirstToken = tuple[int, int | None, int | None]


def first_token(a: list[int], b: list[int]) -> FirstToken:
    i = first_difference(a, b)
    return i, a[i] if i < len(a) else None, b[i] if i < len(b) else None


@dataclass(slots=True)
class Recorder:
    out: Path
    engines: dict[Side, dict[str, Any]]
    session: str  # one id per shadow session: the segments' shared suite hash derives from it
    rotate_bytes: int | None = None
    segment: int = 0
    files: dict[Side, IO[str]] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)

    def open(self) -> None:
        self.segment += 1
        name = f"shadow-{self.segment:04d}"
        suite = SuiteInfo(
            name=name,
            version="1",
            source="shadow traffic",
            data_sha256="",
            content_sha256=hashlib.sha256(f"{self.session}/{name}".encode()).hexdigest(),
            item_ids=[],
        )
        for side in SIDES:
            header = make_header(
                label=side,
                repeat=1,
                engine=self.engines[side],
                sampling=SamplingParams(max_tokens=0),
                suite=suite,
                concurrency=0,
                extra={"shadow": {"session": self.session, "segment": self.segment}},
            )
            path = self.out / f"{side}-{self.segment:04d}.jsonl"
            f = path.open("x", encoding="utf-8")  # never append to another session's file
            f.write(header.model_dump_json() + "\n")
            f.flush()
            self.files[side] = f

    def item_id(self, req: Mirrored) -> str:
        """The request hash; a repeat of the same request gets ``#2``, ``#3``, …"""
        key = req.digest[:24]
        n = self.seen.get(key, 0) + 1
        self.seen[key] = n
        return key if n == 1 else f"{key}#{n}"

    def write(
        self,
        req: Mirrored,
        item_id: str,
        primary: Completion,
        candidate: Completion,
        placed: FirstToken | None = None,
    ) -> None:
        """One request's two answers. ``placed``: where they part, as the candidate's tokenizer
        splits both (``first_token``). Each side records it as [token index, its own token id
        there, the other side's], so that compare places a divergence without reading the
        token ids (a million-item compare read them for 300,000 divergences: seconds)."""
        meta: dict[str, Any] = {"path": req.path, "sent": req.params}
        if not req.comparable:
            meta["comparable"] = False
        for side, c in (("primary", primary), ("candidate", candidate)):
            c.item_id = item_id
            own = meta
            if placed is not None:
                index, ours, theirs = placed if side == "primary" else (placed[0], placed[2], placed[1])
                own = {**meta, "first_token": [index, ours, theirs]}
            self.files[side].write(item_line(make_item(c, req.input, None, own)))  # type: ignore[index]
        for f in self.files.values():
            f.flush()
        if self.rotate_bytes and max(f.tell() for f in self.files.values()) >= self.rotate_bytes:
            self.close()
            self.open()

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.files.clear()
