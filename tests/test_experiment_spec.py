"""The experiment file: validation messages name the line; definitions hash per configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from servediff.cli import main
from servediff.engines.hf_knobs import HFKnobs
from servediff.experiment import ExperimentError, load_experiment, plan_slots
from servediff.experiment.builtin import HFStudyOptions, hf_experiment
from servediff.experiment.lifecycle import Placeholders
from servediff.experiment.listing import check

GOOD = """\
model = "m"
control_repeats = 2

[sampling]
max_tokens = 16

[suites.prompts]
limit = 2

[[configurations]]
label = "stock"
launch = ["vllm", "serve", "m", "--port", "{port}", "--no-enable-prefix-caching"]

[[configurations]]
label = "spec"
launch = ["vllm", "serve", "m", "--port", "{port}",
          "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']

[[configurations]]
label = "remote"
base_url = "http://127.0.0.1:9"

"""
EMBEDDED = """\
model = "m"

[[configurations]]
label = "stock"
config = "stock"

[[configurations]]
label = "embedded"
config = "tuned"
knobs = { n_batch = 8 }
"""
HF = """\
model = "m"
pairs = "control"

[[configurations]]
label = "bf16"
engine = "hf"

[[configurations]]
label = "lookup"
engine = "hf"
knobs = { prompt_lookup = 4, device = "cpu" }
"""


REMOTE = 'base_url = "http://127.0.0.1:9"'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return path


def test_a_good_file(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, GOOD))
    assert [c.kind for c in exp.configurations] == ["launch", "launch", "server"]
    stock, spec, remote = exp.configurations
    assert stock.profile == spec.profile == "vllm" and stock.claims == ()
    assert spec.claims == ("prefix_caching", "speculative_decoding")
    assert remote.profile == "generic"
    assert exp.control == "stock" and exp.sampling.max_tokens == 16
    slots = plan_slots(exp)
    assert [(s.label, s.repeat) for s in slots] == [
        ("stock", 1),
        ("stock", 2),
        ("stock", 3),
        ("spec", 1),
        ("remote", 1),
    ]
    assert len({s.path for s in slots}) == len(slots)


def test_sampling_settings(tmp_path: Path) -> None:
    text = GOOD.replace("max_tokens = 16", "temperature = 0.7\ntop_p = 0.9\ntop_k = 20\nsamples = 8")
    s = load_experiment(write(tmp_path, text)).sampling
    assert (s.temperature, s.top_p, s.top_k, s.samples, s.sampled) == (0.7, 0.9, 20, 8, True)


def test_embedded_configurations(tmp_path: Path) -> None:
    _, embedded = load_experiment(write(tmp_path, EMBEDDED)).configurations
    assert embedded.knobs is not None and embedded.knobs.n_batch == 8 and embedded.knobs.prompt_lookup == 10
    assert embedded.claims == ("speculative_decoding", "flash_attention", "prefix_caching")
    mixed = GOOD + '[[configurations]]\nlabel = "e"\nconfig = "stock"\n'
    with pytest.raises(ExperimentError, match=r":24: embedded and server configurations cannot be mixed"):
        load_experiment(write(tmp_path, mixed))


def test_a_server_configuration_can_send_a_client_s_few_fields(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, GOOD.replace(REMOTE, REMOTE + '\nsend = "minimal"')))
    assert [c.send for c in exp.configurations] == ["all", "all", "minimal"]
    with pytest.raises(ExperimentError, match=r":\d+: configuration 'e': send = 'minimal' is for servers"):
        load_experiment(
            write(
                tmp_path, EMBEDDED + '[[configurations]]\nlabel = "e"\nconfig = "stock"\nsend = "minimal"\n'
            )
        )
    with pytest.raises(ExperimentError, match=":22: configuration 'remote': send must be 'all' or 'minimal'"):
        load_experiment(write(tmp_path, GOOD.replace(REMOTE, REMOTE + '\nsend = "some"')))


def test_transformers_configurations(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, HF))
    bf16, lookup = exp.configurations
    assert bf16.kind == lookup.kind == "embedded" and bf16.knobs is None and exp.pairs == "control"
    assert bf16.hf == HFKnobs() and bf16.claims == ()
    assert lookup.hf == HFKnobs(prompt_lookup=4, device="cpu") and lookup.claims == ("speculative_decoding",)


def test_the_transformers_study_is_an_experiment(tmp_path: Path) -> None:
    exp = hf_experiment(tmp_path / "o", HFStudyOptions(limit=3, device="cpu", only=("fp16-b1",)))
    assert [c.label for c in exp.configurations] == ["bf16-b1", "fp16-b1"]  # the reference stays
    assert exp.control == "bf16-b1" and exp.pairs == "control" and not exp.probes.enabled
    assert all(c.hf is not None and c.hf.device == "cpu" for c in exp.configurations)
    full = hf_experiment(tmp_path / "o", HFStudyOptions(limit=3, prompt_lookup=0))
    assert [c.label for c in full.configurations] == ["bf16-b1", "bf16-batch3", "fp16-b1", "fp32-b1"]
    lines, notes = check(full)
    assert [ln.split("\t")[:3] for ln in lines][:2] == [
        ["bf16-b1", "prompts", "#1"],
        ["bf16-b1", "prompts", "#2"],
    ]
    assert len(lines) == 5 and notes == []


def test_json_in_argv_survives_placeholder_substitution() -> None:
    values = Placeholders(model="m", model_path="/w.gguf", python="py")
    assert values.apply('{"method": "ngram", "k": "{port}"}', 8123) == '{"method": "ngram", "k": "8123"}'
    assert values.apply("{python}:{model}:{model_path}", 1) == "py:m:/w.gguf"


def test_changing_one_configuration_changes_only_its_own_runs(tmp_path: Path) -> None:
    before = {s.label: s.path for s in plan_slots(load_experiment(write(tmp_path, GOOD)))}
    changed = GOOD.replace('"num_speculative_tokens": 3', '"num_speculative_tokens": 5')
    after = {s.label: s.path for s in plan_slots(load_experiment(write(tmp_path, changed)))}
    assert before["spec"] != after["spec"]
    assert {k: v for k, v in before.items() if k != "spec"} == {k: v for k, v in after.items() if k != "spec"}


def test_replicas_resources_and_the_executor(tmp_path: Path) -> None:
    before = load_experiment(write(tmp_path, GOOD))
    assert before.executor.kind == "local" and before.config("remote").replicas == 1
    text = GOOD.replace(REMOTE, 'base_url = ["http://a:1", "http://b:2"]\nreplica_check = 3')
    more = 'label = "spec"\nreplicas = 3\nresources = { num_gpus = 2, H200 = 1 }'
    text = text.replace('label = "spec"', more)
    after = load_experiment(
        write(tmp_path, text + '[executor]\nkind = "ray"\naddress = "ray://head:10001"\n')
    )
    remote, spec = after.config("remote"), after.config("spec")
    assert (remote.base_url, remote.base_urls, remote.replicas, remote.replica_check) == (
        "http://a:1",
        ("http://a:1", "http://b:2"),
        2,
        3,
    )
    assert spec.replicas == 3 and (spec.resources.num_gpus, spec.resources.num_cpus) == (2.0, 1.0)
    assert spec.resources.custom == (("H200", 1.0),)
    assert (after.executor.kind, after.executor.address, after.executor.records) == (
        "ray",
        "ray://head:10001",
        "stream",
    )
    # where it runs is not what it is: the runs of a configuration that only moved are reused
    moved = GOOD.replace('label = "stock"', 'label = "stock"\nresources = { num_gpus = 1 }')
    assert load_experiment(write(tmp_path, moved)).config("stock").digest == before.config("stock").digest
    assert spec.digest != before.config("spec").digest  # three replicas are another configuration


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (GOOD.replace("control_repeats = 2", "control_repeat = 2"), 2, "unknown key 'control_repeat'"),
        (GOOD.replace('label = "remote"', 'label = "remote"\nbase_ulr = "x"'), 21, "unknown key 'base_ulr'"),
        (GOOD.replace("max_tokens = 16", "max_token = 16"), 5, "unknown key 'max_token' in [sampling]"),
        (GOOD.replace("max_tokens = 16", "samples = 4"), 4, "need temperature > 0"),
        (GOOD.replace("max_tokens = 16", "temperature = 0.7\ntop_p = 1.5"), 6, "top_p must be"),
        (GOOD.replace("max_tokens = 16", "temperature = -1"), 5, "temperature must be >= 0"),
        (GOOD.replace("max_tokens = 16", 'temperature = "hot"'), 5, "wrong type"),
        (GOOD.replace('label = "spec"', 'label = "stock"'), 15, "duplicate label 'stock'"),
        (GOOD.replace('model = "m"\n', ""), None, "'model' is required"),
        (GOOD.replace('"--port", "{port}", "--no', '"--no'), 12, "must contain {port}"),
        (EMBEDDED.replace("n_batch = 8", "n_bach = 8"), 10, "unknown knob"),
        (EMBEDDED + '\n[sweep]\nconcurrency = [1, 8]\nconfiguration = "embedded"\n', 14, "is embedded"),
        (GOOD.replace('base_url = "http://127.0.0.1:9"', 'config = "stock"\nbase_url = "x"'), 20, "one of"),
        ("model = [", None, "not valid TOML"),
        (GOOD.replace("[suites.prompts]", "[probes]\nk = 1\n[suites.prompts]"), 8, "between 2 and 20"),
        (GOOD.replace("[suites.prompts]", "[probes]\nreplay = 1\n[suites.prompts]"), 8, "wrong type"),
        (GOOD.replace("[suites.prompts]", "[probes]\nk_top = 5\n[suites.prompts]"), 8, "unknown key 'k_top'"),
        (HF.replace("prompt_lookup = 4", "lookup = 4"), 11, "unknown hf knob 'lookup'"),
        (HF.replace("prompt_lookup = 4", 'prompt_lookup = "4"'), 11, "wrong type"),
        (HF.replace("prompt_lookup = 4", 'dtype = "int8"'), 11, "dtype must be one of"),
        (HF.replace('engine = "hf"', 'engine = "hf"\nconfig = "stock"', 1), 7, "takes knobs only"),
        (HF.replace('engine = "hf"', 'engine = "vllm"', 1), 6, "engine must be 'llamacpp' or 'hf'"),
        (HF.replace('pairs = "control"', 'pairs = "some"'), 2, "pairs must be 'all' or 'control'"),
        (GOOD + '[executor]\nkind = "k8s"\n', 24, "executor.kind must be 'local' or 'ray'"),
        (GOOD + '[executor]\nrecords = "nfs"\n', 24, "executor.records must be"),
        (GOOD + "[executor]\nadress = 1\n", 24, "unknown key 'adress' in [executor]"),
        (GOOD.replace(REMOTE, REMOTE + "\nreplicas = 2"), 22, "list their URLs in base_url"),
        (GOOD.replace(REMOTE, REMOTE + "\nresources = { num_gpus = -1 }"), 22, "resources.num_gpus must be"),
        (GOOD.replace(REMOTE, 'base_url = ["http://a", "http://a"]'), 21, "lists a URL twice"),
        (GOOD.replace(REMOTE, "base_url = []"), 21, "a URL or a list of URLs"),
        # strict types at the boundary: an environment variable is a string, a count no boolean
        (GOOD.replace('label = "spec"', 'label = "spec"\nenv = { A = 1 }'), 16, "env.A has the wrong type"),
        (GOOD.replace("control_repeats = 2", "control_repeats = true"), 2, "control_repeats must be a"),
        (GOOD.replace("control_repeats = 2", "speed_repeats = 0"), 2, "speed_repeats must be"),
        (GOOD.replace("[sampling]", "[sampling]\nthinking = 1"), 5, "thinking must be one of 'on', 'off'"),
    ],
)
def test_mistakes_name_the_line(tmp_path: Path, text: str, line: int | None, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ExperimentError) as e:
        load_experiment(path)
    where = f"{path}:{line}: " if line else f"{path}: "
    assert str(e.value).startswith(where) and message in str(e.value)


def test_cli_exits_2_on_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD.replace('label = "spec"', 'label = "stock"'))
    assert main(["experiment", str(path), "--check"]) == 2
    assert "duplicate label 'stock'" in capsys.readouterr().err
    assert main(["experiment", str(write(tmp_path, GOOD)), "--check", "--out", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out.count("to run") == 5


def test_the_shipped_examples_are_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "empty-cache"))  # valid on a bare machine
    examples = sorted((Path(__file__).parents[1] / "examples").glob("*.toml"))
    assert len(examples) >= 2
    for path in examples:
        exp = load_experiment(path)
        # something to compare: two configurations, or one swept under load against itself
        assert len(exp.configurations) >= 2 or exp.sweep is not None, path.name
    load = load_experiment(Path(__file__).parents[1] / "examples" / "vllm-load.toml")
    assert load.sweep is not None and max(load.sweep.concurrency) == 128
    vllm = load_experiment(Path(__file__).parents[1] / "examples" / "vllm-spec-prefix.toml")
    assert vllm.config("tuned").claims == ("speculative_decoding", "prefix_caching")
    assert vllm.config("stock").profile == "vllm" and vllm.config("stock").claims == ()


def test_a_registry_model_not_fetched_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file is valid and --check lists its runs with a note; a run refuses before writing."""
    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "cache"))
    path = write(tmp_path, GOOD.replace("control_repeats = 2", 'model_path = "qwen2.5-coder-0.5b"'))
    assert main(["experiment", str(path), "--check", "--out", str(tmp_path / "o")]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("to run") == 4
    assert f"{path}:2: model 'qwen2.5-coder-0.5b' is not in the cache" in captured.err
    assert "run `servediff models fetch qwen2.5-coder-0.5b`, before running" in captured.err
    assert main(["experiment", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("run `servediff models fetch qwen2.5-coder-0.5b`"), err
    assert not (tmp_path / "o").exists()


def test_probe_plan_and_templates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both sides of (control, each other configuration) per suite; servers need a chat template
    for chat prompts, except vLLM, which renders them itself (/tokenize with messages): without
    one the others' probes are left out with a note, a missing file is an error."""
    path = write(tmp_path, GOOD)
    assert main(["experiment", str(path), "--check", "--out", str(tmp_path / "o")]) == 0
    out, err = capsys.readouterr()
    assert "note: no probes for stock vs remote (prompts), side remote" in err and "side stock" not in err
    kept = [line.split("\t")[1] for line in out.splitlines() if line.startswith("probe\t")]
    assert kept == [f"stock vs spec (prompts), side {s}" for s in ("stock", "spec")] + [
        "stock vs remote (prompts), side stock"
    ]

    jinja = tmp_path / "chat.jinja"
    jinja.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    write(tmp_path, GOOD.replace("[suites.prompts]", '[probes]\ntemplate = "chat.jinja"\n[suites.prompts]'))
    assert main(["experiment", str(path), "--check", "--out", str(tmp_path / "o")]) == 0
    out, err = capsys.readouterr()
    assert "note:" not in err
    probes = [line.split("\t") for line in out.splitlines() if line.startswith("probe\t")]
    assert [p[1] for p in probes] == [
        f"stock vs {b} (prompts), side {side}" for b in ("spec", "remote") for side in ("stock", b)
    ]
    assert all(p[3].endswith((".a.jsonl", ".b.jsonl")) for p in probes)

    jinja.unlink()
    assert main(["experiment", str(path), "--check", "--out", str(tmp_path / "o")]) == 2
    assert "template: file not found" in capsys.readouterr().err


def test_the_control_runs_first(tmp_path: Path) -> None:
    """Whatever its place in the file: the others can then probe their side while they are up."""
    moved = load_experiment(write(tmp_path, 'control = "spec"\n' + GOOD))
    assert [s.label for s in plan_slots(moved)] == ["spec"] * 3 + ["stock", "remote"]


def test_a_sweep_runs_each_of_several_suites_at_every_level(tmp_path: Path) -> None:
    text = GOOD.replace(
        "[suites.prompts]\nlimit = 2", "[suites.prompts]\nlimit = 2\n[suites.shared-prefix]\nlimit = 2"
    )
    exp = load_experiment(
        write(
            tmp_path,
            text + '[sweep]\nconcurrency = [1, 4]\nrepeats = 2\nsuite = ["prompts", "shared-prefix"]\n',
        )
    )
    swept = [(s.suite.name, s.concurrency, s.repeat) for s in plan_slots(exp) if s.sweep]
    assert swept == [(n, c, r) for n in ("prompts", "shared-prefix") for c in (1, 4) for r in (1, 2)]
    with pytest.raises(ExperimentError, match=r"sweep\.suite 'gsm8k' is not one of the suites"):
        load_experiment(write(tmp_path, text + '[sweep]\nsuite = ["prompts", "gsm8k"]\n'))
