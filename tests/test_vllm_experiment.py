"""The vLLM seed study as servediff reads it: profiles and claims from the launch lines, the
machine's paths from the environment, a concurrency per suite, and probes of chat prompts that
the server renders itself (no template file, no other engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servediff.cli import main
from servediff.experiment import load_experiment, plan_slots
from servediff.experiment.conductor import check_probe_templates, load_suites
from servediff.experiment.lifecycle import LaunchError, Placeholders
from servediff.experiment.plan import suite_digest
from servediff.experiment.probing import plan_probes
from servediff.experiment.spec import SuiteSpec

EXAMPLE = Path(__file__).parents[1] / "examples" / "vllm-seed.toml"


def test_the_seed_study_reads_as_vllm() -> None:
    exp = load_experiment(EXAMPLE)
    assert [c.label for c in exp.configurations] == ["stock", "ngram", "fp8", "draft"]
    assert {c.profile for c in exp.configurations} == {"vllm"}
    assert exp.config("stock").claims == () and exp.config("fp8").claims == ()
    assert exp.config("ngram").claims == ("speculative_decoding", "prefix_caching")
    assert exp.config("draft").claims == ("speculative_decoding", "prefix_caching")
    by_suite = {(s.label, s.suite.name, s.repeat): s.concurrency for s in plan_slots(exp)}
    # identity one request at a time; accuracy at 32 in flight, the control at the same load
    assert by_suite[("stock", "prompts", 2)] == 1 and by_suite[("ngram", "prompts", 1)] == 1
    assert by_suite[("stock", "gsm8k", 2)] == 32 and by_suite[("fp8", "mmlu", 1)] == 32


def test_a_suite_without_its_own_concurrency_keeps_its_file_names() -> None:
    """Files made before suites had a concurrency resume: the unset field is not in the digest."""
    plain, loaded = SuiteSpec("gsm8k", limit=200), SuiteSpec("gsm8k", limit=200, concurrency=32)
    assert suite_digest(plain) != suite_digest(loaded)
    assert suite_digest(plain) == suite_digest(SuiteSpec("gsm8k", limit=200, concurrency=None))


def test_paths_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    values = Placeholders("m")
    monkeypatch.setenv("SERVEDIFF_VLLM_DRAFT", "/models/q05")
    arg = '{"model": "{env:SERVEDIFF_VLLM_DRAFT}", "num_speculative_tokens": 5}'
    assert values.apply(arg, 8000) == '{"model": "/models/q05", "num_speculative_tokens": 5}'
    monkeypatch.delenv("SERVEDIFF_VLLM_DRAFT")
    with pytest.raises(LaunchError, match="SERVEDIFF_VLLM_DRAFT is not set"):
        values.apply(arg, 8000)


def test_vllm_renders_the_chat_prompts_it_is_probed_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No [probes] template: vLLM renders them (/tokenize with messages), so every probe is kept;
    a server that cannot would have its probes left out with a note."""
    monkeypatch.setenv("SERVEDIFF_DATA", str(Path(__file__).parent / "data"))
    exp = load_experiment(EXAMPLE, output=tmp_path / "out")
    suites = load_suites(exp)
    probes, notes = check_probe_templates(exp, plan_probes(exp, plan_slots(exp)), suites)
    assert notes == [] and len(probes) == 18  # stock vs each of three, both sides, three suites
    generic = EXAMPLE.read_text().replace("start_timeout = 900", 'start_timeout = 900\nprofile = "generic"')
    other = tmp_path / "generic.toml"
    other.write_text(generic)
    exp = load_experiment(other, output=tmp_path / "out2")
    probes, notes = check_probe_templates(exp, plan_probes(exp, plan_slots(exp)), load_suites(exp))
    assert probes == [] and len(notes) == 18 and all("[probes] template" in n for n in notes)
    assert main(["experiment", str(EXAMPLE), "--check", "--out", str(tmp_path / "o")]) == 0
    assert "note:" not in capsys.readouterr().err
