"""Writes docs/architecture.svg, the picture of tfinit's layers in docs/layout.md.

The picture is data here, not a drawing: each box names the modules or packages it stands
for, and tests/test_architecture_picture.py checks that every one exists in tfinit/ and that
the SVG on disk is what this script writes. Run ``python docs/architecture.py`` after
changing the boxes.
"""

import pathlib
from xml.sax.saxutils import escape

#: rows of the picture, top (what users call) to bottom (what everything rests on); each box
#: is (title, one line of what it does, its folder under tfinit/, the paths in that folder it
#: stands for, its width in columns of the row). Imports go down the picture, never up
#: (tests/test_layering.py checks the modules themselves).
ROWS = [
    [("integrations", "the command line, the demo, tf.distribute helpers, parameter_infos",
      "", ["cli.py", "demo.py", "distribute.py", "_parameter_infos.py"], 4)],
    [("tfinit.mixed_precision", "fp32 masters beside 16-bit copies: scope, "
      "MasterWeightOptimizer (each once), the master weights, files", "mixed_precision/",
      ["_scope.py", "_optimizer.py", "_chosen_backend.py", "_master_weights.py"], 3),
     ("tfinit.caffe2", "NetDefs -> Keras", "caffe2/", ["__init__.py", "_to_keras.py"], 1)],
    [("_tensorflow/", "pairs by a variable creator", "mixed_precision/",
      ["_tensorflow"], 1),
     ("_keras_variables/", "JAX, torch: built layers pair", "mixed_precision/",
      ["_keras_variables"], 1),
     ("_common/", "every backend, asks none", "mixed_precision/", ["_common"], 1),
     ("one spec per op", "handlers and Keras layers", "caffe2/",
      ["_spec.py", "_ops.py", "_detection.py"], 1)],
    [("initializer family", "Initializer, ExternalInitializer, the PseudoFP16 pair, "
      "ParameterInfo, where values come from", "",
      ["initializers.py", "parameter_info.py", "sources.py"], 4)],
    [("tfinit.fills", "Caffe2's fill operators as Keras initializers, Caffe2's random streams",
      "fills/", ["_constant.py", "_random.py", "_streams.py", "registry.py"], 4)],
    [("foundations", "the backend, the pair rules, the split master's maths, Caffe2's "
      "training pieces, private Keras (one module)", "",
      ["_backend.py", "_precision.py", "_split_master", "_caffe2_training",
       "_keras_internals.py"], 4)],
]

WIDTH, ROW_HEIGHT, GAP, MARGIN, AXIS = 980, 78, 18, 12, 40


def _box(x, y, w, h, title, line, folder, names):
    shown = ", ".join(names)
    return (
        f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" rx="6" fill="#eef3fb" '
        f'stroke="#3a5a8c"/>'
        f'<text x="{x + w / 2:g}" y="{y + 22:g}" text-anchor="middle" font-weight="bold">'
        f"{escape(title)}</text>"
        f'<text x="{x + w / 2:g}" y="{y + 42:g}" text-anchor="middle" font-size="11">'
        f"{escape(line)}</text>"
        f'<text x="{x + w / 2:g}" y="{y + 60:g}" text-anchor="middle" font-size="10" '
        f'fill="#555">{escape(folder + (": " if folder else "") + shown)}</text>'
    )


def render():
    """The SVG text of the picture."""
    height = MARGIN * 2 + len(ROWS) * ROW_HEIGHT + (len(ROWS) - 1) * GAP
    left = MARGIN + AXIS
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="sans-serif" font-size="13">',
        "<title>tfinit: the layers; imports go down</title>",
        '<defs><marker id="down" markerWidth="8" markerHeight="8" refX="4" refY="4" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#3a5a8c"/></marker></defs>',
        f'<line x1="{MARGIN + 10}" y1="{MARGIN}" x2="{MARGIN + 10}" y2="{height - MARGIN}" '
        f'stroke="#3a5a8c" stroke-width="2" marker-end="url(#down)"/>',
        f'<text x="{MARGIN + 26}" y="{height / 2:g}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 {MARGIN + 26} {height / 2:g})">imports go down</text>',
    ]
    for index, row in enumerate(ROWS):
        y = MARGIN + index * (ROW_HEIGHT + GAP)
        columns = sum(box[-1] for box in row)
        unit = (WIDTH - left - MARGIN - (len(row) - 1) * MARGIN) / columns
        x = left
        for title, line, folder, names, span in row:
            w = unit * span
            parts.append(_box(x, y, w, ROW_HEIGHT, title, line, folder, names))
            x += w + MARGIN
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def paths():
    """Every path under tfinit/ that a box names."""
    return [folder + name for row in ROWS for _, _, folder, names, _ in row for name in names]


if __name__ == "__main__":
    target = pathlib.Path(__file__).with_name("architecture.svg")
    target.write_text(render())
    print(f"wrote {target}")
