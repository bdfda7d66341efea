"""Masters under ``keras.distribution`` on JAX: bytes per parameter per device, and the step
time of ``shard_over`` (ZeRO-1) against the same run unsharded.

Run with eight host devices (or on a machine with several accelerators, which it then uses)::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 KERAS_BACKEND=jax JAX_PLATFORMS=cpu \\
        python -m benchmarks.sharded_jax [--quick] [--memory-only | --timing-only] [--width N]

The model is the issue's: a 256-1024-1024-256 MLP (1.58 M parameters), Adam, bfloat16.
Memory: the bytes of every live JAX array on device 0 after a training step, above what was
live before the model was built, per parameter (so the optimizer's scalars are in it).
Layouts: one device; ``ModelParallel`` on a 2x2 ("batch", "model") mesh, Dense kernels sharded
over "model"; ``DataParallel`` over d devices with ``shard_over="batch"``. Step time: medians
of interleaved rounds (``benchmarks._timing.compare``) of a ``fit`` epoch of 10 steps,
``shard_over="batch"`` against ``shard_over=None``, both ``DataParallel`` over d devices.
"""

import gc
import json
import sys

import jax
import keras
import numpy as np

from benchmarks._timing import compare
from tfinit import mixed_precision as mp

CONTENDERS = (("keras mixed", "keras", None), ("fp32 masters", "fp32", None),
              ("split", "split", None), ("split + bf16 state", "split", "bfloat16"))
BATCH = 64


WIDTH = [1024]  # the hidden width (--width N): 1024 is the 1.58 M-parameter MLP


def make():
    width = WIDTH[0]
    return keras.Sequential([keras.Input((256,)),
                             keras.layers.Dense(width, activation="relu", name="d1"),
                             keras.layers.Dense(width, activation="relu", name="d2"),
                             keras.layers.Dense(256, name="d3")])


def build(master, state_dtype, shard_over=None):
    if master == "keras":
        keras.config.set_dtype_policy("mixed_bfloat16")
        try:
            model = make()
        finally:
            keras.config.set_dtype_policy("float32")
        optimizer = keras.optimizers.Adam(1e-3)
    else:
        with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master=master):
            model = make()
        optimizer = mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-3),
                                             state_dtype=state_dtype, shard_over=shard_over)
    model.compile(optimizer=optimizer, loss="mse")
    return model


def device0_bytes():
    gc.collect()
    device = jax.devices()[0]
    return sum(shard.data.nbytes for array in jax.live_arrays()
               for shard in array.addressable_shards if shard.device == device)


def bytes_per_param(master, state_dtype, shard_over=None):
    x = np.random.default_rng(0).normal(size=(BATCH, 256)).astype("float32")
    before = device0_bytes()
    model = build(master, state_dtype, shard_over)
    model.fit(x, x, batch_size=BATCH, epochs=1, verbose=0)
    jax.block_until_ready([v.value for v in model.variables + model.optimizer.variables])
    used = device0_bytes() - before
    params = model.count_params()
    del model
    return round(used / params, 3), params


def model_parallel():
    mesh = keras.distribution.DeviceMesh((2, 2), ["batch", "model"], jax.devices()[:4])
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*d[123]/kernel"] = keras.distribution.TensorLayout([None, "model"])
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def memory_table(widths):
    rows = []
    for label, master, state_dtype in CONTENDERS:
        row = {"contender": label}
        keras.distribution.set_distribution(None)
        row["one device"], params = bytes_per_param(master, state_dtype)
        keras.distribution.set_distribution(model_parallel())
        row["ModelParallel 2x2"] = bytes_per_param(master, state_dtype)[0]
        for d in widths:
            keras.distribution.set_distribution(
                keras.distribution.DataParallel(devices=jax.devices()[:d]))
            shard = None if master == "keras" else "batch"
            row[f"shard_over d={d}"] = bytes_per_param(master, state_dtype, shard)[0]
        rows.append(row)
    keras.distribution.set_distribution(None)
    return rows, params


def step_times(d, repeats, steps):
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=jax.devices()[:d]))
    x = np.random.default_rng(0).normal(size=(BATCH * steps, 256)).astype("float32")
    rows = []
    for label, master, state_dtype in CONTENDERS[1:]:
        def runner(model):
            def run():
                model.fit(x, x, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
                # finished on every device before the other model's program is dispatched
                # (two programs' collectives interleaved on host devices can deadlock)
                jax.block_until_ready([v.value for v in model.variables
                                       + model.optimizer.variables])
            return run

        runs = {}
        for shard in ("batch", None):  # each built and run once before the next is built
            runs[shard] = runner(build(master, state_dtype, shard))
            runs[shard]()
        result = compare(f"{label} d={d}", runs["batch"], runs[None], repeats=repeats)
        rows.append({"contender": label, "devices": d, **result})
    keras.distribution.set_distribution(None)
    return rows


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    quick = "--quick" in argv
    count = len(jax.devices())
    widths = [d for d in (2, 4, 8) if d <= count]
    if count < 2 or (count < 4 and "--timing-only" not in argv):
        print(f"{count} devices: run with XLA_FLAGS=--xla_force_host_platform_device_count=4"
              " (2 for --timing-only)")
        return 1
    if "--width" in argv:
        WIDTH[0] = int(argv[argv.index("--width") + 1])
    results = {"device": str(jax.devices()[0].device_kind), "devices": count}
    if "--timing-only" not in argv:
        results["bytes_per_param"], results["parameters"] = memory_table(widths)
    if "--memory-only" not in argv:
        results["step_time"] = step_times(widths[-1], repeats=3 if quick else 11,
                                          steps=2 if quick else 10)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
