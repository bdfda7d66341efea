"""``state_dtype="int8"`` against float32 and bfloat16 optimizer state (issue 52).

One MLP (``DEPTH`` dense layers of ``width``), split masters (``master="split"``: bfloat16
copy + int16 remainder), Adam, trained with Keras's compiled ``train_on_batch`` on the active
backend (TensorFlow or JAX). For each ``state_dtype`` (None, ``"bfloat16"``, ``"int8"``):

- bytes per parameter of what persists between steps, measured from the variables: the
  layers' (the bfloat16 copies), the pairs' remainders and the inner optimizer's variables
  (int8: the uint8 codes and float32 block scales);
- step time, medians of interleaved rounds (``benchmarks._timing.compare``), int8 and
  bfloat16 state against float32 state.

``python -m benchmarks.int8_state [--quick|--smoke] [--out DIR]`` writes
``results_int8_state_<backend>_<size>.json`` / ``.md`` beside this file (or in ``DIR``).
"""

import argparse
import os
from pathlib import Path

import keras
import numpy as np

from benchmarks._markdown import to_markdown, write_results
from benchmarks._timing import compare
from tfinit import mixed_precision as mp

HERE = Path(__file__).resolve().parent
DEPTH = 3
STATES = {"fp32 state": None, "bf16 state": "bfloat16", "int8 state": "int8"}
SIZES = {"smoke": dict(width=32, batch=8, repeats=2, steps=1),
         "quick": dict(width=512, batch=64, repeats=15, steps=5),
         "full": dict(width=1024, batch=128, repeats=31, steps=5)}


def _contender(state_dtype, width, batch, seed=0):
    keras.utils.set_random_seed(seed)
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master="split"):
        model = keras.Sequential(
            [keras.Input((width,))]
            + [keras.layers.Dense(width, activation="relu") for _ in range(DEPTH - 1)]
            + [keras.layers.Dense(1)])
    optimizer = mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-4), state_dtype=state_dtype)
    model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, width)).astype(np.float32)
    y = 0.1 * rng.standard_normal((batch, 1)).astype(np.float32)
    model.train_on_batch(x, y)  # builds and compiles
    return model, optimizer, x, y


def bytes_per_parameter(model, optimizer):
    """Persistent bytes per trainable parameter: the layers' variables, each pair's
    remainder, the inner optimizer's variables."""
    arrays = [*model.weights, *optimizer.inner_optimizer.variables]
    for variable in model.trainable_variables:
        arrays += [v for v in mp.parameter_info(variable).blob_copy.values()
                   if keras.backend.standardize_dtype(v.dtype) == "int16"]
    total = sum(np.asarray(keras.ops.convert_to_numpy(a)).nbytes for a in arrays)
    return total / sum(int(np.prod(v.shape)) for v in model.trainable_variables)


def run(mode):
    size = SIZES[mode]
    made = {name: _contender(state, size["width"], size["batch"])
            for name, state in STATES.items()}
    rows = [{"name": f"MLP {DEPTH}x{size['width']}, Adam, split masters: {name}",
             "params": sum(int(np.prod(v.shape)) for v in m.trainable_variables),
             "bytes_per_param": round(bytes_per_parameter(m, opt), 3)}
            for name, (m, opt, _, _) in made.items()]

    def steps(name):
        model, _, x, y = made[name]

        def go():
            for _ in range(size["steps"]):
                loss = model.train_on_batch(x, y)
            return float(np.asarray(loss))
        return go

    row = compare(f"MLP {DEPTH}x{size['width']} batch {size['batch']} step "
                  f"({keras.backend.backend()}): int8 state vs fp32 state",
                  steps("int8 state"), steps("fp32 state"), size["repeats"],
                  others={"bf16_state": steps("bf16 state")})
    for key in list(row):
        if key.endswith("_ms"):
            row[key] = round(row[key] / size["steps"], 3)
    rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.int8_state",
                                     description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true")
    group.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    rows = run(mode)
    text = to_markdown(rows)
    print(text)
    write_results(args.out or HERE, f"results_int8_state_{keras.backend.backend()}_{mode}",
                  rows, text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
