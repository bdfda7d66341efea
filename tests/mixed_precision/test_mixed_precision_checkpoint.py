"""Checkpoints never lose fp32 masters: tf.train.Checkpoint, .weights.h5, .keras."""

import _parity as P
import keras
import numpy as np
import pytest
import tensorflow as tf
from _arrays import assert_same_bits

from tfinit import mixed_precision as mp
from tfinit.mixed_precision._tensorflow import pair_records as _pairs


def _build(mode="pseudo_fp16", compute_dtype="float16"):
    with mp.scope(mode, compute_dtype):
        return _plain()


def _plain():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4),
                             keras.layers.BatchNormalization(), keras.layers.Dense(1)])


def _infos(model):
    return [i for i in (_pairs.pair_of(v) for v in model.weights) if i is not None]


def _paired_masters(model):
    """The fp32 masters of ``model``'s paired variables (its 16-bit ones)."""
    return [_pairs.master_of(i).numpy() for i in _infos(model)]


def _perturb(model):
    """``P.perturb`` (bits no 16-bit copy holds, so a lossy round trip shows); returns the
    paired masters."""
    P.perturb(model)
    masters = _paired_masters(model)
    assert any(not np.array_equal(m, m.astype(np.float16).astype(np.float32)) for m in masters)
    return masters


def _assert_restored(model, masters):
    got = _paired_masters(model)
    assert len(got) == len(masters) > 0
    for want, have in zip(masters, got, strict=True):
        assert want.tobytes() == have.tobytes()
    for info in _infos(model):
        c, m = _pairs.copy_of(info), _pairs.master_of(info)
        np.testing.assert_array_equal(c.numpy(), tf.cast(m, c.dtype).numpy())


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.parametrize("mode, compute_dtype", [("pseudo_fp16", "float16"),
                                                 ("reverse", "bfloat16")])
def test_tf_train_checkpoint_round_trip_with_optimizer(tmp_path, mode, compute_dtype):
    model = _build(mode, compute_dtype)
    masters = _perturb(model)
    opt = mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-3))
    x = np.ones((4, 3), np.float32)
    with tf.GradientTape() as tape:
        loss = opt.scale_loss(tf.reduce_sum(tf.cast(model(x, training=True), tf.float32)))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                            model.trainable_variables, strict=True))
    masters = _paired_masters(model)
    slots = [v.numpy() for v in opt.variables]
    path = tf.train.Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "ckpt"))

    model2 = _build(mode, compute_dtype)
    opt2 = mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-3))
    opt2.build(model2.trainable_variables)
    tf.train.Checkpoint(model=model2, optimizer=opt2).read(path).assert_consumed()
    _assert_restored(model2, masters)
    for want, have in zip(slots, opt2.variables, strict=True):
        assert np.asarray(want).tobytes() == have.numpy().tobytes()


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.parametrize("mode, compute_dtype", [("pseudo_fp16", "float16"),
                                                 ("pseudo_fp16", "bfloat16"),
                                                 ("reverse", "float16")])
def test_weights_h5_round_trip(tmp_path, mode, compute_dtype):
    model = _build(mode, compute_dtype)
    masters = _perturb(model)
    model.save_weights(str(tmp_path / "w.weights.h5"))
    model2 = _build(mode, compute_dtype)
    model2.load_weights(str(tmp_path / "w.weights.h5"))
    _assert_restored(model2, masters)


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_keras_file_round_trip_inside_scope_and_refused_outside(tmp_path):
    model = _build()
    masters = _perturb(model)
    model.compile(mp.MasterWeightOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), "mse")
    model.fit(np.ones((8, 3), np.float32), np.ones((8, 1), np.float32), verbose=0)
    masters = _paired_masters(model)
    path = str(tmp_path / "m.keras")
    model.save(path)
    # Outside the scope the layers would be rebuilt without masters: refuse.
    refused = "rebuilding it outside a scope would create 16-bit weights without fp32 masters"
    with pytest.raises(ValueError, match=refused):
        keras.models.load_model(path)
    with mp.scope("pseudo_fp16", "float16"):
        loaded = keras.models.load_model(path)
    _assert_restored(loaded, masters)
    assert isinstance(loaded.optimizer, mp.MasterWeightOptimizer)
    assert isinstance(loaded.optimizer.inner_optimizer, keras.optimizers.SGD)
    for want, have in zip(model.optimizer.variables, loaded.optimizer.variables, strict=True):
        assert want.numpy().tobytes() == have.numpy().tobytes()


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_fp32_weights_fine_tune_into_pseudo_fp16(tmp_path):
    keras.utils.set_random_seed(3)
    fp32 = _plain()
    fp32.save_weights(str(tmp_path / "fp32.weights.h5"))
    path = tf.train.Checkpoint(model=fp32).write(str(tmp_path / "fp32"))
    want = [fp32.layers[0].kernel.numpy(), fp32.layers[0].bias.numpy(),
            fp32.layers[2].kernel.numpy(), fp32.layers[2].bias.numpy()]

    from_h5 = _build()
    from_h5.load_weights(str(tmp_path / "fp32.weights.h5"))
    _assert_restored(from_h5, want)
    from_ckpt = _build()
    tf.train.Checkpoint(model=from_ckpt).read(path).assert_consumed()
    _assert_restored(from_ckpt, want)
    assert from_ckpt.layers[0].kernel.dtype == "float16"


def test_raw_tf_module_checkpoint_keeps_masters(tmp_path):
    """The documented way for raw tf.Module code: a plain tf.train.Checkpoint."""
    class Net(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.full((3,), 1.0 + 2**-20, np.float32), name="w")

    with mp.scope():
        net = Net()
    path = tf.train.Checkpoint(net=net).write(str(tmp_path / "net"))
    with mp.scope():
        net2 = Net()
    mp.parameter_info(net2.w).blob_copy[tf.float32].assign([0.0, 0.0, 0.0])
    mp.sync_copies(net2)
    tf.train.Checkpoint(net=net2).read(path).assert_consumed()
    master = mp.parameter_info(net2.w).blob_copy[tf.float32].numpy()
    assert master.tobytes() == np.full((3,), 1.0 + 2**-20, np.float32).tobytes()
    assert net2.w.numpy().tobytes() == np.full((3,), 1.0, np.float16).tobytes()


def test_checkpoint_with_masters_refuses_plain_16bit_model(tmp_path, dtype_policy):
    """Restoring fp32 masters into a float16 model without masters would drop them."""
    path = tf.train.Checkpoint(model=_build()).write(str(tmp_path / "ckpt"))
    with dtype_policy("float16"):
        plain16 = _plain()
    with pytest.raises(Exception, match="dtype"):
        tf.train.Checkpoint(model=plain16).read(path).assert_consumed()


def _trained(mode, compute_dtype, master):
    with mp.scope(mode, compute_dtype, master=master):
        model = _plain()
    opt = mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-2))
    model.compile(optimizer=opt, loss="mse")
    return model, opt


def _assert_same_masters(model, other):
    """Every master of ``model`` has ``other``'s bits (any kind of pair; copies checked
    against their masters by get_master_weights)."""
    assert_same_bits(mp.get_master_weights(model), mp.get_master_weights(other))


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.parametrize("mode, compute_dtype, master", [
    ("pseudo_fp16", "float16", "fp32"), ("reverse", "bfloat16", "fp32"),
    ("pseudo_fp16", "bfloat16", "split")])
def test_deferred_restore_passes_tensorflows_status_checks(tmp_path, mode, compute_dtype,
                                                          master):
    """Issue 40, 4: restored before the optimizer is built, then built by the first step:
    both status checks pass (as Keras mixed with LossScaleOptimizer), values exact."""
    x = np.random.RandomState(0).rand(8, 3).astype("f4")
    y = np.random.RandomState(1).rand(8, 1).astype("f4")
    m1, o1 = _trained(mode, compute_dtype, master)
    m1.fit(x, y, epochs=2, verbose=0)
    path = tf.train.Checkpoint(model=m1, optimizer=o1).save(str(tmp_path / "ck"))
    m2, o2 = _trained(mode, compute_dtype, master)
    status = tf.train.Checkpoint(model=m2, optimizer=o2).restore(path)
    assert not o2.built
    _assert_same_masters(m2, m1)
    m1.fit(x, y, verbose=0)  # the same step on both: the restored state is all of it
    m2.fit(x, y, verbose=0)
    status.assert_existing_objects_matched()
    status.assert_consumed()
    _assert_same_masters(m2, m1)
    for want, have in zip(o1.variables, o2.variables, strict=True):
        assert np.asarray(want).tobytes() == np.asarray(have).tobytes(), have.path


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_deferred_restore_of_keras_mixed_passes_the_status_checks(tmp_path, dtype_policy):
    """The oracle of the test above: Keras mixed with a LossScaleOptimizer."""
    x = np.random.RandomState(0).rand(8, 3).astype("f4")
    y = np.random.RandomState(1).rand(8, 1).astype("f4")
    with dtype_policy("mixed_float16"):
        k1, k2 = _plain(), _plain()
    for model in (k1, k2):
        model.compile(optimizer=keras.optimizers.LossScaleOptimizer(
            keras.optimizers.Adam(1e-2)), loss="mse")
    k1.fit(x, y, verbose=0)
    path = tf.train.Checkpoint(model=k1, optimizer=k1.optimizer).save(str(tmp_path / "keras"))
    status = tf.train.Checkpoint(model=k2, optimizer=k2.optimizer).restore(path)
    k2.fit(x, y, verbose=0)
    status.assert_existing_objects_matched()
    status.assert_consumed()
