"""Factors: the design expanded from an experiment file, and the attribution over real runs.

The embedded study runs SmolLM2 in-process with one thread, three prompts and a few tokens.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from servediff.cli import main
from servediff.compare.attribution import Cell, item_cause, place
from servediff.compare.study import compare_runs
from servediff.experiment import ExperimentError, load_experiment, run_experiment
from servediff.records import Run, read_run
from servediff.suites import load_suite
from tests.test_report_consistency import check as consistent

# Three of the built-in prompts that part ways within 24 tokens with all three factors on (measured
# on a GGML_NATIVE=OFF build; the first three prompts stayed identical there, so a study of them
# had nothing to attribute), written once as a prompts file of their own.
PROMPT_IDS = ("translate-es", "explain-tcp", "sql-top-customers")
PROMPTS = Path(tempfile.mkdtemp(prefix="servediff-factors-")) / "prompts.jsonl"
PROMPTS.write_text(
    "".join(
        json.dumps({"id": s.id, "messages": list(s.messages or ())}) + "\n"
        for s in load_suite("prompts").samples
        if s.id in PROMPT_IDS
    ),
    encoding="utf-8",
)

HEAD = (
    """\
model = "SmolLM2-135M-Instruct"
control_repeats = 1
{design}

[suites.prompts]
path = "PROMPTS"
max_tokens = 24

[probes]
enabled = false

[[configurations]]
label = "stock"
knobs = {{ threads = 1 }}
"""
).replace("PROMPTS", PROMPTS.as_posix())

FACTORS = """
[[factors]]
name = "flash_attn"
knobs = { flash_attn = true }

[[factors]]
name = "prompt_lookup"
knobs = { prompt_lookup = 10 }

[[factors]]
name = "kv_q8"
knobs = { kv_cache_type = "q8_0" }
"""


def write(tmp_path: Path, text: str, name: str = "study.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_one_at_a_time_with_three_factors_runs_every_combination(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, HEAD.format(design="") + FACTORS))
    labels = [(c.label, c.factors) for c in exp.configurations]
    assert labels == [
        ("stock", ()),
        ("+flash_attn", ("flash_attn",)),
        ("+prompt_lookup", ("prompt_lookup",)),
        ("+kv_q8", ("kv_q8",)),
        ("all-flash_attn", ("prompt_lookup", "kv_q8")),
        ("all-prompt_lookup", ("flash_attn", "kv_q8")),
        ("all-kv_q8", ("flash_attn", "prompt_lookup")),
        ("all", ("flash_attn", "prompt_lookup", "kv_q8")),
    ]
    full = exp.config("all").knobs
    assert full is not None and (full.flash_attn, full.prompt_lookup, full.kv_cache_type, full.threads) == (
        True,
        10,
        "q8_0",
        1,
    )
    assert len({c.digest for c in exp.configurations}) == 8


def test_factorial_with_two_factors_and_the_other_configurations_kept(tmp_path: Path) -> None:
    text = (
        HEAD.format(design='design = "factorial"')
        + "\n\n".join(FACTORS.split("\n\n")[:2])
        + ('\n\n[[configurations]]\nlabel = "tuned"\nconfig = "tuned"\n')
    )
    exp = load_experiment(write(tmp_path, text))
    assert [c.label for c in exp.configurations] == [
        "stock",
        "+flash_attn",
        "+prompt_lookup",
        "all",
        "tuned",
    ]
    assert exp.config("tuned").factors is None


BAD: list[tuple[str, str, str]] = [
    ('design = "factorial"', FACTORS.replace('"kv_q8"', '"a"') * 2, "named twice"),
    (
        'design = "factorial"',
        "".join(f'\n[[factors]]\nname = "f{n}"\nknobs = {{ n_batch = {n + 1} }}\n' for n in range(5)),
        "at most 4 factors",
    ),
    ('design = "sideways"', FACTORS, "design must be one of"),
    ("", '\n[[factors]]\nname = "x"\n', "changes nothing"),
    ("", '\n[[factors]]\nname = "x"\nargs = ["--flash_attn", "true"]\n', "is not launched"),
    (
        "",
        '\n[[factors]]\nname = "a"\nknobs = { n_batch = 8 }\n'
        '[[factors]]\nname = "b"\nknobs = { n_batch = 1 }\n',
        "both set 'n_batch'",
    ),
    ('design = "factorial"', "", "'design' needs [[factors]]"),
    ("", '\n[[factors]]\nname = "x"\nknobs = { nbatch = 8 }\n', "unknown knob"),
]


@pytest.mark.parametrize(("design", "factors", "message"), BAD)
def test_bad_factors_are_one_line_naming_the_file(
    tmp_path: Path, design: str, factors: str, message: str
) -> None:
    with pytest.raises(ExperimentError) as info:
        load_experiment(write(tmp_path, HEAD.format(design=design) + factors))
    text = str(info.value)
    assert message in text and text.startswith(str(tmp_path / "study.toml")) and "\n" not in text


def test_smallest_set_is_established_only_when_every_smaller_set_ran() -> None:
    def cell(on: tuple[str, ...], diverged: tuple[str, ...]) -> Cell:
        return Cell("+".join(on), on, 2 - len(diverged), 2, 0, diverged, (), None, None, 0, None)

    names = ("a", "b", "c")
    both = [cell(("a",), ()), cell(("b",), ()), cell(("a", "b"), ("x",))]
    found = item_cause("x", both, names)
    assert found.smallest == (("a", "b"),) and found.established and found.untried == ()
    # without (b) alone, {a, b} is only an upper bound, and (b) is what would settle it
    partial = item_cause("x", [both[0], both[2]], names)
    assert not partial.established and partial.untried == (("b",),)
    # a divergence under (a) that (a, b) does not show is reported, not hidden
    masked = item_cause("x", [cell(("a",), ("x",)), cell(("a", "b"), ())], names)
    assert masked.smallest == (("a",),) and masked.masked == ("a+b",)


def test_bisection_descends_only_below_a_set_that_still_reproduces() -> None:
    """Delta debugging from all three factors: only the subsets of a reproducing pair are asked for."""

    def cell(on: tuple[str, ...], diverged: tuple[str, ...]) -> Cell:
        return Cell("+".join(on), on, 1 - len(diverged), 1, 0, diverged, (), None, None, 0, None)

    names = ("a", "b", "c")
    first = item_cause("x", [cell(names, ("x",))], names)
    assert not first.established and first.untried == (("a", "b"), ("a", "c"), ("b", "c"))
    pairs = [cell(names, ("x",)), cell(("a", "b"), ("x",)), cell(("a", "c"), ()), cell(("b", "c"), ())]
    second = item_cause("x", pairs, names)
    assert second.smallest == (("a", "b"),) and second.untried == (("a",), ("b",))  # never (c,)
    third = item_cause("x", [*pairs, cell(("a",), ()), cell(("b",), ())], names)
    assert third.established and third.smallest == (("a", "b"),)


def alone_runs(tmp_path: Path) -> dict[str, Run]:
    """The control and each factor alone, as configurations of their own (no design): by label."""
    alone = "".join(
        f'\n[[configurations]]\nlabel = "only-{n}"\nknobs = {{ threads = 1, {k} }}\n'
        for n, k in (
            ("flash_attn", "flash_attn = true"),
            ("prompt_lookup", "prompt_lookup = 10"),
            ("kv_q8", 'kv_cache_type = "q8_0"'),
        )
    )
    separate = load_experiment(
        write(tmp_path, HEAD.format(design="") + alone, "alone.toml"), output=tmp_path / "alone"
    )
    run_experiment(separate, progress=False)
    return {
        p.parent.name.split(".")[0]: read_run(p) for p in (tmp_path / "alone" / "runs").glob("*/*.r1.jsonl")
    }


def test_attribution_agrees_with_each_factor_run_alone(tmp_path: Path) -> None:
    """The design's attribution, against each factor run alone in an experiment of its own."""
    exp = load_experiment(write(tmp_path, HEAD.format(design="") + FACTORS), output=tmp_path / "design")
    outcome = run_experiment(exp, progress=False)
    assert outcome.errors == 0 and len(outcome.ran) == 9
    summary: dict[str, Any] = json.loads((tmp_path / "design" / "summary.json").read_text())
    [att] = summary["attribution"]
    assert att["control_deterministic"] is True and att["missing"] == []
    cells = {c["label"]: c for c in att["cells"]}
    runs = alone_runs(tmp_path)
    causes = {i["item_id"]: i for i in att["items"]}
    for factor in ("flash_attn", "prompt_lookup", "kv_q8"):
        own = compare_runs(runs["stock"], runs[f"only-{factor}"], "pair")
        diverged = {d.item_id for d in own.divergences}
        assert cells[f"+{factor}"]["identical"] == own.identical
        # every item the attribution puts on this factor alone diverges when it runs alone,
        # and every item it runs alone diverges on is attributed to it (alone or among others)
        sole = {i for i, c in causes.items() if c["established"] and c["smallest"] == [[factor]]}
        assert sole <= diverged
        assert all(any(factor in s for s in causes[i]["smallest"]) for i in diverged)
    assert causes, "nothing diverged: the study shows no attribution"
    # every number of the section reads the same in summary.json, report.md and report.html
    assert consistent(sorted((tmp_path / "design" / "runs").glob("*/*.jsonl")))["attribution"]
    md = (tmp_path / "design" / "report.md").read_text()
    page = (tmp_path / "design" / "report.html").read_text()
    assert "## Which factor changes the output?" in md and 'id="factors"' in page
    # the design's place is in every run header: the report renders from the records alone
    header = read_run(next((tmp_path / "design" / "runs").glob("all.*/*.r1.jsonl"))).header
    assert header.extra["experiment"]["factors"]["on"] == ["flash_attn", "prompt_lookup", "kv_q8"]


def test_prefix_cache_factor_reuses_the_branching_suites_shared_history(tmp_path: Path) -> None:
    text = """\
model = "SmolLM2-135M-Instruct"
control_repeats = 0
[suites.branching]
limit = 3
max_tokens = 4
[probes]
enabled = false
[[configurations]]
label = "stock"
knobs = { threads = 1 }
[[factors]]
name = "prefix_cache"
knobs = { prefix_cache = true }
"""
    exp = load_experiment(write(tmp_path, text), output=tmp_path / "out")
    assert [c.label for c in exp.configurations] == ["stock", "+prefix_cache"]
    assert run_experiment(exp, progress=False).errors == 0
    [att] = json.loads((tmp_path / "out" / "summary.json").read_text())["attribution"]
    [cell] = att["cells"]
    assert att["control_deterministic"] is None  # not repeated: the report says so
    # after the first item, all of the shared history comes from the KV cache
    assert cell["prompt_tokens"] > 3 * 300 and cell["cached_tokens"] > 2 * 300
    stock = read_run(next((tmp_path / "out" / "runs").glob("stock.*/*.jsonl")))
    assert {i.metadata["engine"]["cached_prompt_tokens"] for i in stock.items.values()} == {0}
    assert "was not repeated" in (tmp_path / "out" / "report.md").read_text()


def test_bisect_runs_only_the_combinations_that_settle_each_item(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Design "all" runs the control and all three factors together; --bisect narrows every
    divergence down by delta debugging, and its answer agrees with each factor run alone."""
    study = write(tmp_path, HEAD.format(design='design = "all"') + FACTORS)
    argv = ["experiment", str(study), "--out", str(tmp_path / "b"), "--bisect", "--no-progress"]
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("bisect:"))
    [att] = json.loads((tmp_path / "b" / "summary.json").read_text())["attribution"]
    assert att["items"], "nothing diverged under all three factors: nothing to bisect"
    assert all(i["established"] for i in att["items"]) and "0 still an upper bound" in line
    # Every combination's divergences from the control, from the records.
    records = [read_run(p) for p in (tmp_path / "b" / "runs").glob("*/*.r1.jsonl")]
    on = {r.label: where.on for r in records if (where := place(r)) is not None}
    control = next(r for r in records if on[r.label] == ())
    diverged = {
        on[r.label]: {d.item_id for d in compare_runs(control, r, "pair").divergences}
        for r in records
        if on[r.label]
    }
    full = ("flash_attn", "prompt_lookup", "kv_q8")
    added = [s for s in diverged if s != full]
    assert f"{len(added)} combination(s) run beyond the design" in line
    # Only what was needed: each added set is one factor short of a set that reproduced an item.
    for s in added:
        assert any(len(t) == len(s) + 1 and set(s) < set(t) and diverged[t] for t in diverged), s
    assert len(added) <= 6  # at most the pairs and singles, each once
    # The answer agrees with each factor run alone, in an experiment of its own.
    runs = alone_runs(tmp_path)
    alone = {
        f: {d.item_id for d in compare_runs(runs["stock"], runs[f"only-{f}"], "pair").divergences}
        for f in full
    }
    for item in att["items"]:
        for smallest in item["smallest"]:
            if len(smallest) == 1:
                assert item["item_id"] in alone[smallest[0]]
            else:  # needs them together: none of them alone changes the item
                assert all(item["item_id"] not in alone[f] for f in smallest)
    for s in added:
        if len(s) == 1:
            assert diverged[s] == alone[s[0]]
    # A second --bisect resumes: every run is read, none is made again.
    before = {p: p.read_bytes() for p in (tmp_path / "b" / "runs").glob("*/*.jsonl")}
    assert main(argv) == 0
    assert {p: p.read_bytes() for p in (tmp_path / "b" / "runs").glob("*/*.jsonl")} == before
