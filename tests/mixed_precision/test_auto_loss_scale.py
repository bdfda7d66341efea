"""``loss_scale="auto"`` over models without pairs follows Keras's ``compile`` (issue 40, 5).

A Keras ``mixed_float16`` model built under Keras's global policy, no tfinit scope: Keras's
``compile`` wraps a plain optimizer in a dynamic ``LossScaleOptimizer``;
``MasterWeightOptimizer(loss_scale="auto")`` scales it the same way. The case: SGD(1.0), mse
towards 1e-9 from a zero kernel, whose unscaled gradient underflows float16.
"""

import keras
import numpy as np
import pytest

pytestmark = [pytest.mark.backend_neutral,  # TensorFlow, JAX (CI's JAX pass), torch
              pytest.mark.slow]  # each a fit or two: 1-8 s on 2 cores


def _trained_kernel(policy, optimizer, dtype_policy):
    with dtype_policy(policy):
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
            1, use_bias=False, kernel_initializer="zeros")])
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(np.ones((1, 1)), np.full((1, 1), 1e-9), verbose=0)
    return float(keras.ops.convert_to_numpy(model.weights[0].value).ravel()[0]), model


def test_auto_scales_a_keras_mixed_float16_model_as_keras_does(dtype_policy):
    from tfinit import mixed_precision as mp

    want, keras_model = _trained_kernel("mixed_float16", keras.optimizers.SGD(1.0),
                                        dtype_policy)
    assert isinstance(keras_model.optimizer, keras.optimizers.LossScaleOptimizer)
    opt = mp.MasterWeightOptimizer(keras.optimizers.SGD(1.0))
    have, _ = _trained_kernel("mixed_float16", opt, dtype_policy)
    assert want != 0.0 and abs(want - 2e-9) < 1e-11  # 2 * 1e-9, float16's 1e-9 rounded
    assert have == want
    assert opt.dynamic and float(keras.ops.convert_to_numpy(opt.dynamic_scale.value)) == 2**15


def test_auto_does_not_scale_a_keras_mixed_bfloat16_model(dtype_policy):
    """As Keras, which wraps only ``mixed_float16`` models."""
    from tfinit import mixed_precision as mp

    want, _ = _trained_kernel("mixed_bfloat16", keras.optimizers.SGD(1.0), dtype_policy)
    opt = mp.MasterWeightOptimizer(keras.optimizers.SGD(1.0))
    have, _ = _trained_kernel("mixed_bfloat16", opt, dtype_policy)
    assert have == want
    assert not opt.dynamic


def test_a_float32_model_trains_as_with_keras(dtype_policy):
    """A float32 model does not decide "auto" (a model assembled outside a scope from layers
    built in one computes in 16 bits); whatever it resolves to, the step is Keras's."""
    from tfinit import mixed_precision as mp

    want, _ = _trained_kernel("float32", keras.optimizers.SGD(1.0), dtype_policy)
    have, _ = _trained_kernel("float32", mp.MasterWeightOptimizer(keras.optimizers.SGD(1.0)),
                              dtype_policy)
    assert have == want
