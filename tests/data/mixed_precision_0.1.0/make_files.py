"""Writes the mixed-precision files of tfinit 0.1.0 that tests/mixed_precision/
test_files_0_1_0.py loads: run it with tfinit 0.1.0 (commit b2d2078, before issue 43 moved
the modules) first on sys.path, from this folder: ``PYTHONPATH=<0.1.0 checkout> python
make_files.py``.

A pseudo_fp16 float16 model (Dense + BatchNormalization + Dense) compiled with
``MasterWeightOptimizer(Caffe2MomentumSGD(Caffe2LearningRate("step", ...)))``, trained for two
steps (momentum slots and the schedule's iteration not zero), saved as ``.keras``; its masters
and optimizer variables (in order) at save time in ``expected.npz``.
"""

import keras
import numpy as np

import tfinit
from tfinit import caffe2
from tfinit import mixed_precision as mp

assert tfinit.__version__ == "0.1.0"
keras.utils.set_random_seed(0)
with mp.scope("pseudo_fp16", compute_dtype="float16"):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="hidden"),
                              keras.layers.BatchNormalization(name="norm"),
                              keras.layers.Dense(2, name="head")])
schedule = caffe2.learning_rate("step", base_lr=0.05, stepsize=1, gamma=0.5)
model.compile(optimizer=mp.MasterWeightOptimizer(
    mp.Caffe2MomentumSGD(schedule, momentum=0.9, caffe2_weight_decay=1e-3)), loss="mse")
rng = np.random.default_rng(0)
x, y = rng.normal(size=(8, 4)).astype("float32"), rng.normal(size=(8, 2)).astype("float32")
model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
model.save("model.keras")
np.savez("expected.npz", x=x, y=y,
         **{f"master_{i}": w for i, w in enumerate(mp.get_master_weights(model))},
         **{f"optimizer_{i}": np.asarray(v) for i, v in enumerate(model.optimizer.variables)})
print("wrote model.keras, expected.npz:", len(model.optimizer.variables), "optimizer variables")
