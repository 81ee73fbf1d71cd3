"""Make the reference studies of tests/test_reference_summaries.py: run the small ones on the
embedded engine (one thread), keep their records, and write every study's summary.json.

    python scripts/reference_summaries.py                    # run the small studies, write every summary
    python scripts/reference_summaries.py --summaries-only   # only (re)write the summaries

The records are kept with machine paths replaced by neutral ones (the interpreter's prefix by
/venv, the output folder by /out, the repository by /repo), so nothing local is committed; the
summaries are built from the kept records. Re-run only when a
summary is meant to change, and say why in the commit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.reference import REFERENCE, ROOT, STUDIES, summary_of
from tests.report_fixtures import write_study

CONFIGS = """
[[configurations]]
label = "stock"
config = "stock"
knobs = { threads = 1 }

[[configurations]]
label = "tuned"
config = "tuned"
knobs = { threads = 1 }
"""
DEMO = f"""title = "demo (reduced)"
model = "SmolLM2-135M-Instruct"
control_repeats = 1
[sampling]
top_logprobs = 5
[suites.prompts]
limit = 4
max_tokens = 48
[suites.mmlu]
limit = 12
[probes]
k = 5
{CONFIGS}"""
SAMPLED = f"""title = "sampled (reduced)"
model = "SmolLM2-135M-Instruct"
control_repeats = 1
[sampling]
temperature = 0.7
samples = 3
seed = 42
[suites.mmlu]
limit = 8
[probes]
enabled = false
{CONFIGS}"""


def servediff(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "servediff", *args], check=True, cwd=ROOT)


def experiment(name: str, toml: str, work: Path) -> None:
    spec = work / f"{name}.toml"
    spec.write_text(toml, encoding="utf-8")
    servediff("experiment", str(spec), "--out", str(work / name), "--no-progress")
    keep(work / name, REFERENCE / name, work)


def gate(work: Path) -> None:
    out = work / "gate"
    args = ["gate", "--config-a", "stock", "--config-b", "tuned", "--suite", "gsm8k"]
    args += ["--data", "tests/data/sums.jsonl", "--max-tokens", "16", "--margin", "0.3"]
    args += ["--max-items", "20", "--batch", "5", "--determinism-items", "3", "--no-progress"]
    subprocess.run([sys.executable, "-m", "servediff", *args, "--out", str(out)], cwd=ROOT)  # exit 1 allowed
    keep(out, REFERENCE / "gate", work)


def keep(src: Path, dest: Path, work: Path) -> None:
    """Copy the record files (runs and probes), machine paths replaced by placeholders."""
    shutil.rmtree(dest, ignore_errors=True)
    for path in src.rglob("*.jsonl"):
        text = path.read_text(encoding="utf-8")
        for local, placeholder in ((str(work), "/out"), (sys.prefix, "/venv"), (str(ROOT), "/repo")):
            text = text.replace(json.dumps(local)[1:-1], placeholder)
        target = dest / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--summaries-only", action="store_true")
    p.add_argument("--study", action="append", help="only these (default: all)")
    args = p.parse_args(argv)
    chosen = set(args.study or [s.name for s in STUDIES])
    runs = {
        "demo": lambda w: experiment("demo", DEMO, w),
        "sampled": lambda w: experiment("sampled", SAMPLED, w),
    }
    runs["gate"] = gate
    if not args.summaries_only:
        if "constructed" in chosen:
            shutil.rmtree(REFERENCE / "constructed", ignore_errors=True)
            write_study(REFERENCE / "constructed")
        with tempfile.TemporaryDirectory() as tmp:
            for name in chosen & runs.keys():
                runs[name](Path(tmp))
    with tempfile.TemporaryDirectory() as scratch:
        for study in (s for s in STUDIES if s.name in chosen):
            summary = summary_of(study, Path(scratch))
            for suite in summary["suites"]:
                suite["source"] = None  # a data file's local path: named differently on purpose (CHANGED)
            study.summary_path.write_text(
                json.dumps(summary, indent=1, sort_keys=True) + "\n", encoding="utf-8"
            )
            print(f"{study.name}: {study.summary_path.stat().st_size:,} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
