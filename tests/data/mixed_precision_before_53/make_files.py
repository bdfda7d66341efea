"""Writes the files of tfinit before issue 48.5 (commit 8d564de): a ``MasterWeightOptimizer``
stored every slot of its inner optimizer twice (``optimizer/vars`` repeated
``optimizer/inner_optimizer/vars``). tests/mixed_precision/test_files_before_53.py loads them.
Run it with that commit first on sys.path, from this folder, once per backend:
``KERAS_BACKEND=tensorflow python make_files.py`` and ``KERAS_BACKEND=jax python make_files.py``.

Per backend and kind (pseudo_fp16 float16 fp32 masters, pseudo_fp16 bfloat16 split masters,
reverse float16): a Dense + Dense model compiled with ``Adam``, trained for two steps, saved
as ``<backend>_<kind>.keras``; its masters and optimizer state at save time in
``<backend>_<kind>.npz`` (``master_<i>``; ``optimizer_<i>``: iterations, step_counter,
dynamic_scale, then the inner optimizer's variables), with the data (``x``, ``y``).
"""

import keras
import numpy as np

from tfinit import mixed_precision as mp

KINDS = {"fp32": ("pseudo_fp16", "float16", "fp32"), "split": ("pseudo_fp16", "bfloat16", "split"),
         "reverse": ("reverse", "float16", "fp32")}
backend = keras.backend.backend()
rng = np.random.default_rng(0)
x, y = rng.normal(size=(8, 4)).astype("float32"), rng.normal(size=(8, 2)).astype("float32")
for kind, (mode, dtype, master) in KINDS.items():
    keras.utils.set_random_seed(0)
    with mp.scope(mode, compute_dtype=dtype, master=master):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="hidden"),
                                  keras.layers.Dense(2, name="head")], name="net")
    model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.Adam(0.01), name="mwo"),
                  loss="mse")
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    model.save(f"{backend}_{kind}.keras")
    opt = model.optimizer
    state = [opt.iterations, opt.step_counter, opt.dynamic_scale, *opt.inner_optimizer.variables]
    np.savez(f"{backend}_{kind}.npz", x=x, y=y,
             **{f"master_{i}": w for i, w in enumerate(mp.get_master_weights(model))},
             **{f"optimizer_{i}": np.asarray(v) for i, v in enumerate(state)})
    print("wrote", f"{backend}_{kind}.keras")
