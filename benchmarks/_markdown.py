"""The Markdown tables every benchmark writes (one helper, imported by each), the results
files beside them, and the command line of the benchmarks that print one table (``--quick`` /
``--smoke``); imports nothing else."""

import argparse
import json


def to_markdown(rows):
    """A Markdown table of ``rows`` (dicts); columns are the union of their keys."""
    columns = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def write_results(folder, stem, results, text):
    """Write ``results`` as ``folder/stem.json`` and its Markdown ``text`` as ``stem.md``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    (folder / f"{stem}.md").write_text(text)


def print_table_main(run, prog, description, argv=None):
    """``python -m PROG [--quick|--smoke]``: prints ``run(mode)``'s rows as a table; 0."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true")
    size.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    print(to_markdown(run("smoke" if args.smoke else "quick" if args.quick else "full")))
    return 0
