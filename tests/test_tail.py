"""Following a record as a worker writes it: only complete lines travel, a rewritten header or
a sealed (shortened) file is sent whole, and the receiver's copy equals the complete part."""

from __future__ import annotations

from pathlib import Path

from servediff.experiment.tail import Tail, apply


def replay(tail: Tail, dest: Path) -> list[str]:
    kinds = []
    for kind, rel, data in tail.poll():
        apply(dest, kind, rel, data)
        kinds.append(kind)
    return kinds


def test_lines_headers_and_seals_reach_the_receiver(tmp_path: Path) -> None:
    src, dest = tmp_path / "worker", tmp_path / "driver"
    record = src / "runs" / "a.jsonl"
    record.parent.mkdir(parents=True)
    copy = dest / "runs" / "a.jsonl"
    tail = Tail(src, {})
    record.write_bytes(b'{"h": 1}\n{"id": "x"}\n{"id": "y"')  # the last line is being written
    assert replay(tail, dest) == ["put"] and copy.read_bytes() == b'{"h": 1}\n{"id": "x"}\n'
    assert replay(tail, dest) == []  # nothing complete since
    with record.open("ab") as f:
        f.write(', "t": "é"}\n{"id": "z"}\n'.encode())
    assert replay(tail, dest) == ["append"]
    assert copy.read_bytes() == record.read_bytes()
    record.write_bytes(b'{"h": 1, "verification": {}}\n' + record.read_bytes().split(b"\n", 1)[1])
    assert replay(tail, dest) == ["put"] and copy.read_bytes() == record.read_bytes()


def test_a_seeded_file_that_shrinks_is_sent_whole(tmp_path: Path) -> None:
    src, dest = tmp_path / "worker", tmp_path / "driver"
    seeded = b'{"h": 1}\n{"id": "x"}\n{"id": "y"}\n'
    for root in (src, dest):
        apply(root, "put", "r.jsonl", seeded)
    tail = Tail(src, {"r.jsonl": seeded})
    assert replay(tail, dest) == []  # the receiver has it already
    # rewritten in place, longer: it grew, but not by appending
    (src / "r.jsonl").write_bytes(b'{"h": 1}\n{"id": "x"}\n{"id": "z"}\n{"id": "w"}\n')
    kinds = replay(tail, dest)
    assert (dest / "r.jsonl").read_bytes() == (src / "r.jsonl").read_bytes(), kinds
