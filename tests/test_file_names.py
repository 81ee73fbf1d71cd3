"""Labels and suite names become file names only through ``servediff.filename.file_stem``: no path
out of the output folder, no folder, no two labels sharing one file (gate: tests/test_gate.py)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from servediff.cli import main
from servediff.experiment import load_experiment
from servediff.experiment.plan import plan_slots
from servediff.experiment.probing import plan_probes
from servediff.filename import MAX_STEM, file_stem

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ["../escaped", "a/b", "..", ".", "", ".hidden", "a\\b", "x\x00y", "c:\\evil", "é" * 300, "\x1b[31m"]


@given(st.text())
def test_any_text_becomes_one_safe_name(text: str) -> None:
    stem = file_stem(text)
    assert stem and len(stem) <= MAX_STEM and not stem.startswith(".")
    assert all(c.isascii() and (c.isalnum() or c in "._+-") for c in stem)


def test_safe_labels_keep_their_names_and_others_do_not_collide() -> None:
    for label in ("stock", "tuned", "+flash_attn", "q8_0.v2", "stock-2"):
        assert file_stem(label) == label  # the paths of existing runs do not move
    stems = [file_stem(t) for t in [*HOSTILE, "a_b", "_.._escaped"]]
    assert len(set(stems)) == len(stems)
    assert file_stem("a/b").startswith("a_b-") and file_stem("../escaped").startswith("_.._escaped-")


def test_an_experiment_suite_name_cannot_leave_the_output_folder(tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").write_text('{"id": "a", "prompt": "Say hi."}\n', encoding="utf-8")
    launch = 'launch = ["python3", "-m", "some.server", "--port", "{port}"]\n'
    study = tmp_path / "study.toml"
    study.write_text(
        'model = "m"\n[suites."../../../../escape"]\npath = "s.jsonl"\n'
        f'[[configurations]]\nlabel = "a"\n{launch}[[configurations]]\nlabel = "b"\n{launch}',
        encoding="utf-8",
    )
    exp = load_experiment(study, output=tmp_path / "out")
    slots = plan_slots(exp)
    paths = [s.path for s in slots] + [p.path for p in plan_probes(exp, slots)]
    assert len(paths) == 3 + 2  # a twice (the control), b once; a probe record per side
    for path in paths:
        assert path.resolve().is_relative_to((tmp_path / "out").resolve()), path
        assert "/" not in path.name and ".." not in path.relative_to(tmp_path / "out").parts


def test_imported_runs_with_hostile_labels_land_inside_out(tmp_path: Path) -> None:
    log = next((ROOT / "tests/data/importers/lm_eval/chat-stock").rglob("samples_gsm8k_*.jsonl"))
    out = tmp_path / "deep" / "runs"
    argv = ["import", "lm-eval", str(log), str(log), "--label", "../x", "--label", "a/b", "--out", str(out)]
    assert main(argv) == 0
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert len(written) == 2 and all(p.parent == out for p in written)
