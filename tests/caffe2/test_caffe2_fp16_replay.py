"""A short Caffe2 fp16 training run replayed bit for bit with Keras's fit.

``tests/data/caffe2_fp16_replay.npz`` (README there): 12 updates of Caffe2's
build_multi_precision_sgd (LearningRate "step", MomentumSGDUpdate nesterov 0.9 on the fp32
masters, weight decay on the weight only) of a 1 -> 1 FC with PseudoFP16Initializer
parameters, batch 1. The recipe is docs/porting.md's: the schedule, Caffe2MomentumSGD with
``caffe2_weight_decay``, ``MasterWeightOptimizer(..., loss_scale=None)``.
"""

import keras
import numpy as np
import pytest
from conftest import REPO

from tfinit import mixed_precision as mp
from tfinit.caffe2 import learning_rate

pytestmark = pytest.mark.backend_neutral  # runs in CI's JAX pass too

# On JAX, fit's XLA-compiled step contracts the update's multiply-adds into fused ones (rounded
# once, where Caffe2 rounds each product): Caffe2's bits need the step run op by op there.
JIT_COMPILE = False if keras.backend.backend() == "jax" else "auto"

with np.load(REPO / "tests" / "data" / "caffe2_fp16_replay.npz") as _file:
    REF = dict(_file)  # read once, the file closed


def _fit(steps):
    with mp.scope("pseudo_fp16"):
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    mp.set_master_weights(model, [REF["init/fc_w_fp32"].T, REF["init/fc_b_fp32"]])
    schedule = learning_rate("step", 0.02, stepsize=1, gamma=0.999)
    opt = mp.MasterWeightOptimizer(
        mp.Caffe2MomentumSGD(schedule, momentum=0.9, caffe2_weight_decay=1e-4),
        loss_scale=None)
    model.compile(opt, "mse", jit_compile=JIT_COMPILE)
    x, t = REF["x"].reshape(-1, 1)[:steps], REF["t"].reshape(-1, 1)[:steps]
    model.fit(x, t, batch_size=1, shuffle=False, epochs=1, verbose=0)
    return model, opt


@pytest.mark.parametrize("steps", [3, 12])
def test_fit_replays_caffe2s_multi_precision_sgd_bit_for_bit(steps):
    model, opt = _fit(steps)
    kernel, bias = mp.get_master_weights(model)
    assert kernel.T.tobytes() == REF["step/fc_w_fp32"][steps - 1].tobytes()
    assert bias.tobytes() == REF["step/fc_b_fp32"][steps - 1].tobytes()
    dense = model.layers[0]
    assert dense.kernel.numpy().T.tobytes() == REF["step/fc_w"][steps - 1].tobytes()
    assert dense.bias.numpy().tobytes() == REF["step/fc_b"][steps - 1].tobytes()
    momentums = [m.numpy() for m in opt.inner_optimizer.momentums]
    assert momentums[0].T.tobytes() == REF["step/fc_w_momentum"][steps - 1].tobytes()
    assert momentums[1].tobytes() == REF["step/fc_b_momentum"][steps - 1].tobytes()
    assert int(opt.iterations.numpy()) == steps
