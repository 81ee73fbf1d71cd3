"""One report model, three renderings: every number summary.json holds reads the same in the
Markdown and in the HTML, on a constructed study and on the committed GPU study's records."""

from __future__ import annotations

import html
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from servediff.compare.loader import load
from servediff.compare.machine_load import Load
from servediff.compare.precision import Precision
from servediff.compare.reruns import Speedup
from servediff.report import fmt, render, wording
from servediff.report.assembly import build
from servediff.report.sections import speed as speed_section
from tests.report_fixtures import write_study

GPU_STUDY = Path(__file__).resolve().parents[1] / "docs" / "studies" / "gpu-h200" / "study-full.tar.gz"


def md_text(text: str) -> str:
    """The Markdown as a reader sees it: no code fences, emphasis, cell bars or escapes."""
    text = re.sub(r"\\(.)", r"\1", text.replace("**", "").replace("`", ""))
    return " ".join(html.unescape(text.replace("|", " ")).split())


def html_text(page: str) -> str:
    page = re.sub(r"<svg.*?</svg>", " ", page, flags=re.S)  # plots draw their own labels
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def gap(g: float | None, p: Precision) -> str:
    """A gap as the reports show it, with its grid steps derived here from the precision."""
    if g is None:
        return "—"
    if g == 0:
        return "0 (exact tie)"
    return f"{g:.4f} ({g / p.smallest_step:.0f} steps)" if p.coarse and p.smallest_step else f"{g:.4f}"


def expected(summary: dict[str, Any]) -> list[str]:
    """Phrases built from summary.json alone, each number formatted as both reports format it."""
    out: list[str] = []
    for c in [*summary["controls"], *summary["pairs"]]:
        out.append(
            f"{c['suite']} {c['a']} #{c['a_repeat']} {c['b']} #{c['b_repeat']} {c['kind']} "
            f"{c['identical']}/{c['total']} {c['errors']}"
        )
        prec = Precision(**{k: v for k, v in c["precision"].items() if k != "coarse"})
        for d in c["divergences"]:
            gap_a = gap(d["a"]["gap"] if d["a"] else None, prec)
            gap_b = gap(d["b"]["gap"] if d["b"] else None, prec)
            shift = (
                "—"
                if d["shift_a"] is None and d["shift_b"] is None
                else (f"{fmt.signed(d['shift_a'])} / {fmt.signed(d['shift_b'])}")
            )
            out.append(f"{gap_a} {gap_b} {shift} {d['cls']}")
        h = c["hazard"]
        if h and not h["upper_bound_only"]:
            out.append(
                f"{h['events']} divergence(s) in {fmt.count(h['exposure'])} tokens at risk: "
                f"{fmt.rate(h['per_1000'])} per 1,000 tokens (exact Poisson 95% CI "
                f"{fmt.rate(h['low_1000'])}–{fmt.rate(h['high_1000'])})"
            )
        elif h:
            out.append(
                f"no divergence in {fmt.count(h['exposure'])} tokens: rate < {fmt.rate(h['high_1000'])}"
            )
    q = summary["quality"]
    for a in q["accuracies"] if q else []:
        value = a["accuracy"]
        out.append(
            f"{a['label']} #{a['repeat']} {fmt.pp(value)} % ({a['correct']}/{a['n']}) "
            f"{fmt.pp(a['ci']['low'])}–{fmt.pp(a['ci']['high'])} %"
        )
    for p in q["pairs"] if q else []:
        t, ci = p["table"], p["delta_ci"]
        delta = t["delta"]
        out.append(
            f"{t['b']} / {t['c']} {fmt.pvalue(p['p_mcnemar'])} {fmt.spp(delta)} pp "
            f"[{fmt.spp(ci['low'])}, {fmt.spp(ci['high'])}] {p['verdict']}"
        )
    return out + speed_phrases(summary)


def _iv(x: dict[str, Any], f: Any) -> str:
    return f"{f(x['value'])} [{f(x['low'])}, {f(x['high'])}]"


def speed_phrases(summary: dict[str, Any]) -> list[str]:
    """The Speed table's rows and the verdicts' speed, as both reports format them."""
    out: list[str] = []
    for s in summary["speed"]:
        row = f"{s['suite']} {s['label']} {s['concurrency']} {s['items']} ({s['warmup']}, {s['errors']})"
        if s["tokens_per_s"]:
            row += f" {_iv(s['tokens_per_s'], fmt.per_s)} {_iv(s['requests_per_s'], fmt.per_s)}"
        else:
            row += " n/a n/a"
        row += " " + " / ".join(fmt.seconds(x["value"]) for x in s["latency"])
        out.append(row)
        if s["speedup"] and _unsteady(s):
            load = Load(s["load"]["a"], s["load"]["b"], s["load"]["verdict"])
            note = wording.load_note(load, s["reference"], s["label"])
            out.append(f"{fmt.speedup(s['speedup']['value'])} ({note}) vs {s['reference']}")
        elif s["speedup"]:
            # The interval says what it covers: reruns ("over 2 and 2 runs") or, with one run
            # each, item sampling only (and then no direction is claimed).
            x = _speedup(s["speedup"])
            if x.basis == "items":
                note = f"({wording.ONE_RUN_EACH})"
                out.append(f"{fmt.speedup(x.value)} {wording.speedup_interval(x)} {note} vs {s['reference']}")
            else:
                out.append(
                    f"{fmt.speedup(x.value)} ({speed_section.direction(x)}) "
                    f"{wording.speedup_interval(x)} vs {s['reference']}"
                )
    for v in summary["verdicts"]:  # the verdict table's row
        if v["reference"] and v["speedup"] and _unsteady(v):  # a note in place of the interval
            out.append(f"{v['label']} {v['reference']} {fmt.speedup(v['speedup']['value'])}")
        elif v["reference"] and v["speedup"]:
            x = _speedup(v["speedup"])
            where = "" if v["concurrency"] == 1 else f" at concurrency {v['concurrency']}"
            note = f" — {wording.ONE_RUN_EACH}" if x.basis == "items" else ""
            speed = f"{fmt.speedup(x.value)} {wording.speedup_interval(x)}{where}{note}"
            out.append(f"{v['label']} {v['reference']} {speed}")
    return out + attribution_phrases(summary) + kl_phrases(summary)


def _speedup(x: dict[str, Any]) -> Speedup:
    return Speedup(x["value"], x["low"], x["high"], x["basis"], (x["runs"][0], x["runs"][1]))


def _unsteady(view: dict[str, Any]) -> bool:
    """Measured under different loads (or an oversubscribed machine): a note, no interval."""
    return bool(view.get("load")) and view["load"]["verdict"] in ("changed", "oversubscribed")


def kl_phrases(summary: dict[str, Any]) -> list[str]:
    """The teacher-forced divergence table: one row per pair of scoring runs."""
    out: list[str] = []
    for k in summary.get("kl", []):
        pct = " / ".join(fmt.kld(v) for _, v in k["kl_percentiles"])
        out.append(
            f"{k['suite']} {k['a']} {k['b']} {k['kind']} {k['checkpoint_a']} / {k['checkpoint_b']} "
            f"{k['top_k']} {k['sequences']} ({fmt.count(k['positions'])}) {_iv(k['kl_mean'], fmt.kld)} "
            f"{fmt.kld(k['kl_max'])} {pct} {_iv(k['same_top1'], fmt.pp)} {fmt.pp(k['predicted_flip_rate'])} "
            f"{_iv(k['dp_mean'], fmt.kld)} {fmt.kld(k['dp_rms'])} {_iv(k['ln_ppl_ratio'], fmt.kld)}"
        )
    return out


def attribution_phrases(summary: dict[str, Any]) -> list[str]:
    """The "Which factor" tables: each combination's row and each factor's row."""

    def ratio(c: dict[str, Any] | None) -> str:
        return f"{c['identical']}/{c['total']}" if c else "not run"

    out: list[str] = []
    for a in summary.get("attribution", []):
        for c in a["cells"]:
            h, q = c["hazard"], c["quality"]
            rate = f"{fmt.rate(h['per_1000'])} ({fmt.rate(h['low_1000'])}–{fmt.rate(h['high_1000'])})"
            left = f" ({c['errors']} left out)" if c["errors"] else ""
            cached = c["cached_tokens"]
            cached = (
                "not recorded"
                if cached is None
                else f"{fmt.count(cached)} of {fmt.count(c['prompt_tokens'])}"
            )
            ci = q and f"[{fmt.spp(q['delta_ci']['low'])}, {fmt.spp(q['delta_ci']['high'])}]"
            delta = f"{fmt.spp(q['table']['delta'])} pp {ci}" if q else "not scored"
            on = " + ".join(c["on"])
            out.append(f"{c['label']} {on} {ratio(c)}{left} {rate if h else 'n/a'} {cached} {delta}")
        for f in a["rows"]:
            prevents = "n/a" if f["prevents"] is None else f"{f['prevents']}/{f['diverging_with_all']}"
            out.append(f"{f['factor']} {ratio(f['alone'])}")
            out.append(f"{ratio(f['without'])} {prevents} {len(f['sole'])}")
    return out + sampled_phrases(summary)


def _estimate(e: dict[str, Any] | None, signed: bool = False) -> str:
    if not e or e["n"] == 0:
        return "n/a"
    f, unit = (fmt.spp, "pp") if signed else (fmt.pp, "%")
    return f"{f(e['mean'])} {unit} [{f(e['ci']['low'])}, {f(e['ci']['high'])}]"


def sampled_phrases(summary: dict[str, Any]) -> list[str]:
    """The sampled block's rows: pass rates per run, and each pair's coupled identity and Δ."""
    s = summary.get("sampled")
    if not s:
        return []
    out = [
        f"{a['suite']} {a['label']} #{a['repeat']} {a['k']} {a['draws']} {_estimate(a['pass_rate'])} "
        f"({a['pass_rate']['n']} items) {_estimate(a['pass_at_k'])} {_estimate(a['pass_all_k'])} {a['short']}"
        for a in s["rates"]
    ]
    for p in s["pairs"]:
        items = p["delta"]["n"] if p["delta"] else "not scored"
        out.append(f"{p['suite']} {p['a']} {p['b']} {p['kind']} {p['identical']}/{p['compared']} draws")
        out.append(f") {_estimate(p['delta'], signed=True)} {items} {p['verdict'] or 'n/a'}")
        if p["first"]:
            f = p["first"]
            diverged = len(f["positions"]) + f["unknown"]
            out.append(f"{p['suite']} {p['a']} {p['b']} {p['kind']} {diverged}/{f['compared']}")
        for d in p["sizing"]["sizes"] if p["sizing"] else []:
            sizes = f"{_items(d['paired'], d['k'])} {_items(d['unpaired'], d['k'])}"
            out.append(f"{p['suite']} {p['a']} {p['b']} {d['k']} {sizes}")
    return out


def _items(n: int | None, k: int) -> str:
    return "any (no variance seen)" if n is None else f"{fmt.count(n)} ({fmt.count(n * k)})"


def check(paths: list[Path]) -> dict[str, Any]:
    report = build(*load(paths))
    summary = json.loads(json.dumps(render.summary(report)))  # as summary.json holds it
    md, page = md_text(render.markdown(report)), html_text(render.html(report))
    phrases = expected(summary)
    assert phrases
    assert [x for x in phrases if x not in md] == []
    assert [x for x in phrases if x not in page] == []
    return summary


def test_constructed_study_reads_the_same_everywhere(tmp_path: Path) -> None:
    summary = check(write_study(tmp_path / "runs"))
    assert summary["schema_version"] == 1 and summary["record"] == "servediff-summary"
    assert summary["quality"]["pairs"]  # the quality phrases were checked, not skipped
    assert summary["speed"] and summary["verdicts"]


def test_scoring_runs_read_the_same_everywhere(tmp_path: Path) -> None:
    """Scoring runs (control, its repeat, a KV q8_0 candidate) on the embedded engine: the KL
    table's numbers agree in all three renderings, the A/A row is exactly 0."""
    from servediff.cli import main

    data = Path(__file__).parent / "data" / "gsm8k" / "test.jsonl"
    paths = []
    for label, repeat, kv in (("stock", 1, "f16"), ("stock", 2, "f16"), ("kv-q8", 1, "q8_0")):
        out = tmp_path / f"{label}-{repeat}.jsonl"
        argv = ["run", "--score", "gsm8k", "--data", str(data), "--limit", "3", "--threads", "1"]
        argv += ["--kv-cache-type", kv, "--label", label, "--repeat", str(repeat), "--out", str(out)]
        assert main([*argv, "--no-progress"]) == 0
        paths.append(out)
    summary = check(paths)
    rows = {(k["a"], k["b"], k["kind"]): k for k in summary["kl"]}
    assert set(rows) == {("stock", "stock", "control"), ("stock", "kv-q8", "pair")}
    floor, pair = rows[("stock", "stock", "control")], rows[("stock", "kv-q8", "pair")]
    assert floor["kl_mean"] == {"value": 0.0, "low": 0.0, "high": 0.0} and floor["same_top1"]["value"] == 1
    assert pair["kl_mean"]["low"] > 0 and pair["positions"] == floor["positions"] > 0
    # scoring pairs are the KL section's, not identity rows of the fixed text
    assert not summary["controls"] and not summary["pairs"]
    assert summary["uncontrolled"] is False  # the KL control row is a control: no "No control" note
    # The distribution plot's data: every position counted once; A/A all in the first bin (KL 0).
    assert sum(floor["kl_hist_counts"]) == floor["positions"] == floor["kl_hist_counts"][0]
    assert sum(pair["kl_hist_counts"]) == pair["positions"] and pair["kl_hist_counts"][0] < pair["positions"]
    assert len(pair["kl_hist_edges"]) == len(pair["kl_hist_counts"]) + 1
    page = render.html(build(*load(paths)))
    plot = page[page.index('id="plot-kl-distribution"') :]
    assert plot.index("<svg") < plot.index("</figure>") and "99th percentile" in plot


@pytest.fixture(scope="module")
def gpu_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("gpu")
    with tarfile.open(GPU_STUDY) as tar:
        tar.extractall(folder, filter="data")
    return sorted((folder / "runs").glob("*.jsonl"))


def test_gpu_study_numbers_unchanged_and_consistent(gpu_runs: list[Path]) -> None:
    summary = check(gpu_runs)
    # Speed was checked with numbers, not only n/a: the GPU records hold real latencies.
    assert all(s["tokens_per_s"] for s in summary["speed"])
    assert sum(1 for v in summary["verdicts"] if v["speedup"]) == 4
    identical = {
        (c["a"], c["b"]): c["identical"]
        for c in [*summary["controls"], *summary["pairs"]]
        if c["a"] == "bf16-b1" and c["total"] == 20
    }
    assert identical == {
        ("bf16-b1", "bf16-b1"): 20,
        ("bf16-b1", "bf16-batch20"): 11,
        ("bf16-b1", "bf16-lookup8"): 8,
        ("bf16-b1", "fp16-b1"): 3,
        ("bf16-b1", "fp32-b1"): 2,
    }
