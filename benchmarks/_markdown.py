"""The Markdown tables every benchmark writes (one helper, imported by each; imports nothing)."""


def to_markdown(rows):
    """A Markdown table of ``rows`` (dicts); columns are the union of their keys."""
    columns = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)
