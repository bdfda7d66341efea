"""tfinit.mixed_precision on Keras's torch backend (the JAX implementation, keras.Variable based).

Runs when the Keras backend is torch (``KERAS_BACKEND=torch``, torch installed): CI's torch
pass (``.ci/run``, torch pinned in ``.ci/torch-version.txt``); skipped on the other backends. The
oracle: Keras's own ``mixed_*`` policies on torch, trained the same way, from the same fp32
weights: the fp32 masters must come out bit-identical.
"""

import os

import keras
import numpy as np
import pytest
from _arrays import assert_same_bits, to_numpy
from _parity import NP16, SPECS

pytestmark = [pytest.mark.backend_neutral,  # collected in CI's JAX pass too (skipped there)
              pytest.mark.skipif(keras.backend.backend() != "torch",
                                 reason="needs KERAS_BACKEND=torch (torch installed)")]
L = keras.layers


def _model():
    return keras.Sequential([keras.Input((6,)), L.Dense(8, activation="tanh"), L.Dense(2)])


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("mode, dtype", SPECS)
def test_fit_masters_equal_keras_mixed_bit_for_bit(mp, dtype_policy, mode, dtype, optimizer):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 6)).astype("float32")
    y = rng.normal(size=(48, 2)).astype("float32")
    with dtype_policy(f"mixed_{dtype}"):
        ref = _model()
    with mp.scope(mode, compute_dtype=dtype):
        model = _model()
    start = ref.get_weights()
    mp.set_master_weights(model, start)
    for m in (ref, model):
        m.compile(optimizer=keras.optimizers.get(optimizer), loss="mse")
        m.fit(x, y, batch_size=16, shuffle=False, verbose=0)  # 3 eager steps each
    assert isinstance(model.optimizer, mp.MasterWeightOptimizer)
    assert len(start) == len(ref.get_weights()) and not all(  # it trained
        a.tobytes() == b.tobytes() for a, b in zip(ref.get_weights(), start, strict=True))
    assert_same_bits(mp.get_master_weights(model), ref.get_weights())
    for variable in model.trainable_weights:  # copies re-cast; torch tensors of their dtype
        info = mp.parameter_info(variable)
        assert info.master_array().astype(NP16[dtype]).tobytes() == to_numpy(info.copy).tobytes()
        assert to_numpy(variable).dtype == (NP16[dtype] if mode == "pseudo_fp16" else np.float32)


def test_the_master_is_not_the_copys_torch_parameter(mp):
    """torch's keras.Variable reuses a torch.nn.Parameter it is given: the master must get
    its own, or it would become 16-bit with the copy."""
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        dense = L.Dense(3, kernel_initializer=keras.initializers.RandomNormal(seed=1))
        dense.build((None, 4))
    master = mp.parameter_info(dense.kernel).blob_copy["float32"]
    assert master.value is not dense.kernel.value and to_numpy(master).dtype == np.float32
    assert str(dense.kernel.value.dtype) == "torch.bfloat16"  # the tensor itself is 16-bit
    parameters = {id(p) for p in dense.parameters()}  # Module.zero_grad clears the copy
    assert id(dense.kernel.value) in parameters


def test_an_overflow_step_is_skipped_eagerly(mp):
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = keras.Sequential([keras.Input((2,)), L.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    opt = model.optimizer
    opt.build(model.trainable_variables)
    before = mp.get_master_weights(model)
    opt.apply([np.full((2, 1), np.inf, np.float16), np.ones((1,), np.float16)])
    assert_same_bits(mp.get_master_weights(model), before)  # the values changed in place: undone
    assert float(to_numpy(opt.dynamic_scale)) == 2.0**14 and int(to_numpy(opt.iterations)) == 0


@pytest.mark.parametrize("mode, dtype", SPECS)
def test_files_and_set_weights_keep_the_masters_exactly(mp, tmp_path, mode, dtype):
    with mp.scope(mode, compute_dtype=dtype):
        model = _model()
    masters = [np.asarray(w) + np.float32(1e-4) for w in mp.get_master_weights(model)]
    model.set_weights(masters)  # assign sets the masters exactly
    assert_same_bits(mp.get_master_weights(model), masters)
    model.save_weights(os.path.join(tmp_path, "a.weights.h5"))
    model.save(os.path.join(tmp_path, "a.keras"))
    mp.save_weights(model, os.path.join(tmp_path, "fp32.weights.h5"))
    with mp.scope(mode, compute_dtype=dtype):
        again = _model()
    again.load_weights(os.path.join(tmp_path, "a.weights.h5"))
    assert_same_bits(mp.get_master_weights(again), masters)
    with mp.scope(mode, compute_dtype=dtype):
        loaded = keras.saving.load_model(os.path.join(tmp_path, "a.keras"))
    assert_same_bits(mp.get_master_weights(loaded), masters)
    plain = _model()
    plain.load_weights(os.path.join(tmp_path, "fp32.weights.h5"))
    assert_same_bits(plain.get_weights(), masters)


def test_split_master_is_refused_on_torch(mp):
    with pytest.raises(ValueError, match="`master` must be 'fp32' on Keras's torch"):
        with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master="split"):
            pass
