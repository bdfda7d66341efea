"""Caffe2MomentumSGD(caffe2_weight_decay=): brew's add_weight_decay, replayed by hand.

brew: ``WeightedSum([grad, ONE, w, WD])`` on the parameters tagged WEIGHT, then
``MomentumSGDUpdate`` (nesterov); biases (tagged BIAS) get no decay. Keras's
``weight_decay=`` stays Keras's decoupled decay on every variable.
"""

import keras
import numpy as np
import pytest

from tfinit import mixed_precision as mp

pytestmark = pytest.mark.backend_neutral  # runs in CI's JAX pass too

LR, MU, WD = np.float32(0.1), np.float32(0.9), np.float32(1e-2)


def _brew_step(w, m, g, decay):
    """One brew update in numpy float32: WeightedSum then MomentumSGDUpdate (nesterov)."""
    if decay:
        g = g * np.float32(1) + w * WD
    m_new = MU * m + LR * g
    return w - ((np.float32(1) + MU) * m_new - MU * m), m_new


def _model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, bias_initializer="ones")])
    model.layers[0].kernel.assign(np.arange(6, dtype=np.float32).reshape(3, 2) / 7)
    return model


def test_weight_decay_reaches_kernels_not_biases_bit_for_bit():
    model = _model()
    opt = mp.Caffe2MomentumSGD(float(LR), float(MU), caffe2_weight_decay=float(WD))
    rng = np.random.default_rng(0)
    layer = model.layers[0]
    want = {"kernel": layer.kernel.numpy(), "bias": layer.bias.numpy()}
    moms = {k: np.zeros_like(v) for k, v in want.items()}
    for _ in range(3):
        grads = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in want.items()}
        opt.apply_gradients([(grads["kernel"], layer.kernel), (grads["bias"], layer.bias)])
        for k in want:
            want[k], moms[k] = _brew_step(want[k], moms[k], grads[k], decay=k == "kernel")
    assert layer.kernel.numpy().tobytes() == want["kernel"].tobytes()
    assert layer.bias.numpy().tobytes() == want["bias"].tobytes()


def test_weight_decay_without_it_differs_so_the_test_can_fail():
    model = _model()
    opt = mp.Caffe2MomentumSGD(float(LR), float(MU), caffe2_weight_decay=float(WD))
    kernel = model.layers[0].kernel
    opt.apply_gradients([(np.zeros([3, 2], np.float32), kernel)])
    no_decay, _ = _brew_step(np.arange(6, dtype=np.float32).reshape(3, 2) / 7,
                             np.zeros([3, 2], np.float32), np.zeros([3, 2], np.float32), False)
    assert not np.array_equal(kernel.numpy(), no_decay)


def test_masters_of_a_pseudo_fp16_model_are_decayed_by_their_layer_names():
    with mp.scope("pseudo_fp16"):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
                                  keras.layers.BatchNormalization()])
    opt = mp.MasterWeightOptimizer(
        mp.Caffe2MomentumSGD(float(LR), float(MU), caffe2_weight_decay=float(WD)),
        loss_scale=None)
    dense = model.layers[0]
    before = {"kernel": mp.get_master_weights(model)[0]}
    opt.apply_gradients([(np.zeros(v.shape, v.dtype), v) for v in model.trainable_variables])
    masters = mp.get_master_weights(model)
    want, _ = _brew_step(before["kernel"], np.zeros_like(before["kernel"]),
                         np.zeros_like(before["kernel"]), True)
    assert masters[0].tobytes() == want.tobytes()
    assert np.array_equal(masters[1], np.zeros([2], np.float32))   # bias: untouched
    assert np.array_equal(masters[3], np.zeros([2], np.float32))   # BN beta: untouched
    assert dense.kernel.dtype == "float16"


def test_keras_weight_decay_keeps_its_meaning_and_decays_biases():
    model = _model()
    bias = model.layers[0].bias
    opt = mp.Caffe2MomentumSGD(1.0, 0.0, weight_decay=0.5)
    opt.apply_gradients([(np.zeros([2], np.float32), bias)])
    np.testing.assert_array_equal(bias.numpy(), [0.5, 0.5])


def test_config_round_trips_and_bad_values_are_refused():
    opt = mp.Caffe2MomentumSGD(0.1, 0.9, caffe2_weight_decay=1e-4)
    again = mp.Caffe2MomentumSGD.from_config(opt.get_config())
    assert again.caffe2_weight_decay == pytest.approx(1e-4)
    for bad in (-1.0, float("nan"), "1e-4"):
        with pytest.raises(ValueError, match="`caffe2_weight_decay` must be"):
            mp.Caffe2MomentumSGD(0.1, caffe2_weight_decay=bad)
