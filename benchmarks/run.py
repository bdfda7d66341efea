"""``python -m benchmarks [--quick]``: every side-by-side comparison, in one run.

Prints a Markdown table of medians and tfinit/baseline ratios and writes
``benchmarks/results.json`` and ``benchmarks/results.md``.
"""

import argparse
import json
import os
import platform
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = Path(__file__).resolve().parent


def _sections():
    from benchmarks import fills

    return [("fills", fills.run)]


def to_markdown(rows):
    lines = ["| benchmark | tfinit (ms) | baseline (ms) | ratio |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['ours_ms']} | {r['baseline_ms']} | {r['ratio']} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    parser.add_argument("--out", type=Path, default=HERE, help="folder for results.json / results.md")
    args = parser.parse_args(argv)
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "quick": args.quick, "sections": {}}
    for name, run in _sections():
        rows = run(args.quick)
        results["sections"][name] = rows
        print(f"\n## {name}\n\n{to_markdown(rows)}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    md = "\n\n".join(f"## {n}\n\n{to_markdown(r)}" for n, r in results["sections"].items())
    (args.out / "results.md").write_text(md + "\n")
    return 0
