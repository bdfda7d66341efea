"""The training-step comparisons as the model width doubles 4 times (float16).

Same contenders as ``benchmarks.training``; the ratio's trend shows how tfinit's extra
per-parameter work (cast of the gradient, refresh of the copy) compares with Keras's
per-read casts as the weights grow (batch fixed).
"""

from benchmarks.training import MODELS, compare_step

SIZES = {
    "smoke": dict(base=8, doublings=1, batch=4, repeats=2, steps=1),
    "quick": dict(base=64, doublings=2, batch=64, repeats=15, steps=1),
    "full": dict(base=128, doublings=4, batch=64, repeats=51, steps=1),
}


def run(mode):
    s = SIZES[mode]
    rows = []
    for kind in MODELS:
        for k in range(s["doublings"] + 1):
            rows.append(compare_step(kind, s["base"] * 2**k, "float16", s["repeats"],
                                     s["steps"], s["batch"]))
    return rows
