"""Where Keras's own ``mixed_float16`` misbehaves on JAX, tfinit against a corrected oracle.

Two parity cases of test_keras_parity.py are skipped on Keras's JAX backend because the
oracle, Keras ``mixed_float16``, is the side that goes wrong (``JAX_GAPS`` there,
docs/mixed-precision.md#on-kerass-jax-backend). Each test here measures that cause and checks
tfinit against the oracle with the cause removed, bit for bit, on every backend.

- Nadam: ``LossScaleOptimizer.build`` runs under ``no_automatic_dependency_tracking``, so the
  inner Nadam's ``_u_product`` (a bare ``backend.Variable`` made in ``Nadam.build``) is not
  tracked: it is missing from the optimizer's ``variables``, so on JAX it is not state of the
  compiled step and every step reads its initial 1.0 (the product of the momentum-decay
  factors never accumulates). A Nadam built before ``compile`` has it tracked.
- MultiHeadAttention in float16 cannot run on JAX's CPU backend at all (Keras's and tfinit's
  alike): ``jax.nn.dot_product_attention`` asks for ``DotAlgorithmPreset.F16_F16_F32``,
  which CPU's ``dot_general`` rejects when the step compiles. The layer's explicit-scores
  path (``return_attention_scores=True``) is plain einsums and runs.
"""

import _parity as P
import keras
import numpy as np
import pytest

from tfinit import mixed_precision as mp

pytestmark = [pytest.mark.backend_neutral, pytest.mark.slow]


def _dense_model():
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(2)])


@pytest.mark.parametrize("mode", P.MODES)
def test_nadam_float16_masters_equal_keras_mixed_with_its_u_product_tracked(mode):
    ref, model = P.twins(_dense_model, mode, "float16")
    plain = P.keras_mixed(_dense_model, "float16")
    plain.set_weights(ref.get_weights())
    x, y = P.data((6,), (2,), n=4 * P.BATCH)
    P.fit(plain, keras.optimizers.Nadam(1e-2), x, y)
    inner = keras.optimizers.Nadam(1e-2)
    inner.build(ref.trainable_variables)  # before LossScaleOptimizer.build: u_product tracked
    P.fit(ref, inner, x, y)
    assert type(ref.optimizer).__name__ == "LossScaleOptimizer"
    # The cause: built inside LossScaleOptimizer.build, Nadam has one variable fewer.
    assert len(ref.optimizer.variables) == len(plain.optimizer.variables) + 1
    P.fit(model, mp.MasterWeightOptimizer(keras.optimizers.Nadam(1e-2)), x, y)
    P.assert_bitwise(mp.get_master_weights(model), ref.get_weights(), P.names(ref))
    P.assert_copies_synced(model)
    same = all(np.array_equal(a, b)
               for a, b in zip(plain.get_weights(), ref.get_weights(), strict=True))
    # On JAX the untracked u_product is lost between steps (TensorFlow keeps it: stateful).
    assert same == (keras.backend.backend() != "jax")


def _attention_with_scores():
    inputs = keras.Input((5, 4))
    h, _ = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)(
        inputs, inputs, return_attention_scores=True)
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(inputs, keras.layers.Dense(2)(h))


@pytest.mark.parametrize("mode", P.MODES)
def test_float16_attention_scores_path_masters_equal_keras_mixed(mode):
    ref, model = P.twins(_attention_with_scores, mode, "float16")
    x, y = P.data((5, 4), (2,))
    have, want = P.fit_twins(ref, model, lambda m: keras.optimizers.Adam(1e-2), x, y)
    P.assert_bitwise(have, want, P.names(ref))
    P.assert_copies_synced(model)
