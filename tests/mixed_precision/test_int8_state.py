"""``MasterWeightOptimizer(inner, state_dtype="int8")`` (issue 52): the inner optimizer's
moments stored blockwise in 8 bits (uint8 codes on a dynamic map, one float32 absmax scale
per block of 256), dequantized for the step and requantized after it; the masters exact.

On every backend: the rounding error within the bound the map and the block give; the first
step's masters bit-identical to float32 state (the step computes on the dequantized moments
in float32, and starts from the same zeros); about 6 bytes per parameter with split masters,
measured from the variables; refusals; files and checkpoints round-trip the codes and
scales bit-exactly and training resumes bit-identically; a small fine-tune ends within 3 %
of the float32-state run's loss.
"""

import os

import keras
import numpy as np
import pytest

from tfinit import mixed_precision as mp
from tfinit.mixed_precision._common import quantized_state as qs

pytestmark = pytest.mark.backend_neutral

BACKEND = keras.backend.backend()
#: split masters where the backend has them (torch refuses master="split": fp32 masters)
MASTER = "fp32" if BACKEND == "torch" else "split"
COMPUTE = "float16" if BACKEND == "torch" else "bfloat16"
#: the persistent bytes of a master and its copy, per parameter
MASTER_BYTES = {"split": 4, "fp32": 6}[MASTER]


def _scope():
    return mp.scope("pseudo_fp16", compute_dtype=COMPUTE, master=MASTER)


def _model(units=256, seed=0):
    keras.utils.set_random_seed(seed)
    with _scope():
        # fixed names: a state tree is matched by path
        return keras.Sequential([keras.Input((8,)),
                                 keras.layers.Dense(units, activation="tanh", name="hidden"),
                                 keras.layers.Dense(1, name="head")], name="net")


def _data(n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    return x, (np.sin(x[:, :1]) + 0.5 * x[:, 1:2]).astype(np.float32)


def _optimizer(state_dtype, learning_rate=1e-3):
    return mp.MasterWeightOptimizer(keras.optimizers.Adam(learning_rate, name="adam"),
                                    state_dtype=state_dtype, loss_scale=None, name="mwo")


# ------------------------------------------------------------------ the maps and the rounding

@pytest.mark.parametrize("levels", [qs.SIGNED, qs.UNSIGNED], ids=["signed", "unsigned"])
def test_a_map_is_255_sorted_levels_with_zero_and_one_exact(levels):
    assert levels.dtype == np.float32 and len(levels) == 255
    assert np.all(np.diff(levels) > 0)
    assert 0.0 in levels and levels[-1] == 1.0
    assert levels[0] == (-1.0 if levels is qs.SIGNED else 0.0)
    # near the block's maximum the relative step is 1/64 (signed) or 1/128 (unsigned) of 0.9
    assert np.isclose(levels[-1] - levels[-2], 0.9 / (64 if levels is qs.SIGNED else 128))
    smallest = 1e-6 * (0.1 + 0.9 / (1 if levels is qs.SIGNED else 2))  # the lowest decade's
    assert np.isclose(levels[levels > 0][0], smallest)


@pytest.mark.parametrize("levels,signed", [(qs.SIGNED, True), (qs.UNSIGNED, False)],
                         ids=["signed", "unsigned"])
def test_quantize_then_dequantize_stays_within_the_maps_bound(levels, signed):
    rng = np.random.default_rng(1)
    # 1000 elements: 4 blocks of 256, the last one padded; magnitudes over 8 decades
    values = rng.lognormal(sigma=4.0, size=(10, 100)) * 1e-3
    if signed:
        values *= rng.choice([-1.0, 1.0], size=values.shape)
    values[0, :7] = 0.0
    values = values.astype(np.float32)
    codes, scales = qs.quantize(keras.ops.convert_to_tensor(values), levels)
    assert tuple(codes.shape) == (4, 256) and tuple(scales.shape) == (4,)
    assert keras.backend.standardize_dtype(codes.dtype) == "uint8"
    # each code is the nearest level's (numpy's search over the map's midpoints)
    flat_scales = np.repeat(keras.ops.convert_to_numpy(scales), 256)[:1000]
    normed = (values.ravel() / np.where(flat_scales > 0, flat_scales, 1)).astype(np.float32)
    nearest = np.searchsorted((levels[1:] + levels[:-1]) / 2, normed)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(codes).ravel()[:1000], nearest)
    back = keras.ops.convert_to_numpy(qs.dequantize(codes, scales, levels, (10, 100)))
    error = np.abs(back.astype(np.float64) - values)
    bound = qs.error_bound(values, levels)
    assert np.all(error <= bound), float(np.max(error - bound))
    assert np.all(back[0, :7] == 0.0)
    # each block's maximum is stored exactly (the level 1): the scale is the absmax
    flat = np.concatenate([np.abs(values).ravel(), np.zeros(24)]).reshape(4, 256)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(scales), flat.max(axis=1))
    # the bound never exceeds half the map's widest gap times the block's maximum (the
    # float32 rounding's share aside)
    block_max = np.repeat(flat.max(axis=1), 256)[:1000].reshape(10, 100)
    assert np.all(bound <= block_max * np.max(np.diff(levels)) / 2 * (1 + 1e-4))


def test_a_slot_smaller_than_a_block_is_one_block_of_its_size():
    assert qs.stored_shapes((3, 5)) == ((1, 15), (1,))
    assert qs.stored_shapes((300,)) == ((2, 256), (2,))
    assert qs.stored_shapes(()) == ((1, 1), (1,))


# ------------------------------------------------------------------ refusals

def test_int8_state_is_refused_without_moments_and_with_shard_over():
    with pytest.raises(ValueError, match=r"`state_dtype='int8'`.*SGD keeps none.*"
                                         r"SGD\(momentum=0.9\)"):
        mp.MasterWeightOptimizer(keras.optimizers.SGD(0.1), state_dtype="int8")
    combine = (r"`state_dtype='int8'` does not combine with `shard_over`" if BACKEND == "jax"
               else r"`shard_over`.*works on Keras's JAX backend only")  # refused before
    with pytest.raises(ValueError, match=combine + r".*Received: shard_over='batch'"):
        mp.MasterWeightOptimizer(keras.optimizers.Adam(), state_dtype="int8",
                                 shard_over="batch")
    with pytest.raises(ValueError, match=r"`state_dtype` must be None, 'float32', 'bfloat16' "
                                         r"or 'int8'. Received: state_dtype='int4'"):
        mp.MasterWeightOptimizer(keras.optimizers.Adam(), state_dtype="int4")


class _NoSlots(keras.optimizers.Optimizer):
    """Plain gradient descent written as a Keras optimizer with no per-variable state."""

    def update_step(self, gradient, variable, learning_rate):
        self.assign_sub(variable, keras.ops.multiply(gradient, learning_rate))


def test_int8_state_is_refused_at_build_for_an_optimizer_that_made_no_moments():
    model = _model(units=4)
    optimizer = mp.MasterWeightOptimizer(_NoSlots(learning_rate=0.1), state_dtype="int8")
    with pytest.raises(ValueError, match=r"`state_dtype='int8'`.*_NoSlots keeps none"):
        optimizer.build(model.trainable_variables)


# ------------------------------------------------------------------ the state and the step

def _train(state_dtype, steps=1, learning_rate=1e-3, seed=0):
    model = _model(seed=seed)
    optimizer = _optimizer(state_dtype, learning_rate)
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    x, y = _data()
    for i in range(steps):
        model.train_on_batch(x[16 * (i % 4):16 * (i % 4) + 16], y[16 * (i % 4):16 * (i % 4) + 16])
    return model, optimizer


def _bytes_per_parameter(model, optimizer):
    """Persistent bytes per trainable parameter: the layers' variables, each pair's other
    stored variable, the inner optimizer's variables."""
    arrays = [*model.weights, *optimizer.inner_optimizer.variables]
    for variable in model.trainable_variables:
        arrays += [v for v in mp.parameter_info(variable).blob_copy.values()
                   if keras.backend.standardize_dtype(v.dtype) != "float32" or MASTER == "fp32"]
    total = sum(np.asarray(keras.ops.convert_to_numpy(a)).nbytes for a in arrays)
    return total / sum(int(np.prod(v.shape)) for v in model.trainable_variables)


@pytest.mark.slow  # over 1 s on 2 cores
def test_first_step_masters_match_fp32_state_and_the_state_is_codes_and_scales():
    exact, exact_opt = _train(None)
    model, optimizer = _train("int8")
    # the step computes on float32 moments (zeros, dequantized exactly): the same masters
    for a, b in zip(mp.get_master_weights(exact), mp.get_master_weights(model), strict=True):
        assert a.tobytes() == b.tobytes()
    # what the inner optimizer stores for the paired variables: uint8 codes, float32 scales
    names = {v.path.rsplit("/", 1)[-1]: v for v in optimizer.inner_optimizer.variables}
    codes = [v for n, v in names.items() if n.endswith("_codes")]
    scales = [v for n, v in names.items() if n.endswith("_scales")]
    assert len(codes) == len(scales) == 8  # 2 layers x (kernel, bias) x (momentum, velocity)
    assert {keras.backend.standardize_dtype(v.dtype) for v in codes} == {"uint8"}
    assert not any(n.endswith(("_momentum", "_velocity")) for n in names)
    # each slot is the float32 run's within the map's bound
    slots = optimizer.inner_optimizer._momentums + optimizer.inner_optimizer._velocities
    wanted = exact_opt.inner_optimizer._momentums + exact_opt.inner_optimizer._velocities
    for slot, want in zip(slots, wanted, strict=True):
        want = keras.ops.convert_to_numpy(want)
        error = np.abs(np.asarray(slot.numpy(), np.float64) - want)
        assert np.all(error <= qs.error_bound(want, slot._levels))
    # about 6 bytes per parameter with split masters (the master 4, each moment 1 + 4/256)
    per_parameter = _bytes_per_parameter(model, optimizer)
    assert MASTER_BYTES + 2 <= per_parameter <= MASTER_BYTES + 2.1, per_parameter
    assert _bytes_per_parameter(exact, exact_opt) >= MASTER_BYTES + 8


@pytest.mark.slow  # over 1 s on 2 cores
def test_a_small_fine_tune_ends_within_3_percent_of_fp32_state():
    x, y = _data(n=256, seed=3)
    losses = {}
    for state_dtype in (None, "int8"):
        model = _model(units=64, seed=3)
        model.compile(optimizer=_optimizer(state_dtype, 3e-4), loss="mse", jit_compile=False)
        history = model.fit(x, y, batch_size=32, epochs=4, shuffle=False, verbose=0)
        losses[state_dtype] = history.history["loss"][-1]
    assert losses[None] < history.history["loss"][0]  # it trains
    assert abs(losses["int8"] - losses[None]) <= 0.03 * losses[None], losses


def _arrays(variables):
    return [np.asarray(keras.ops.convert_to_numpy(v)) for v in variables]


def _assert_same(a, b):
    assert len(a) == len(b)
    for p, q in zip(a, b, strict=True):
        assert p.dtype == q.dtype and p.tobytes() == q.tobytes()


@pytest.mark.slow  # over 1 s on 2 cores
def test_files_round_trip_codes_and_scales_and_training_resumes_bit_identically(tmp_path):
    model, optimizer = _train("int8", steps=3)
    model.save_weights(tmp_path / "w.weights.h5")
    model.save(tmp_path / "m.keras")
    again, again_opt = _train("int8", steps=1, seed=5)  # other weights, other state
    again.load_weights(tmp_path / "w.weights.h5")
    with _scope():
        loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.optimizer.state_dtype == "int8"
    for other in (again, loaded):
        _assert_same(_arrays(optimizer.variables), _arrays(other.optimizer.variables))
        _assert_same(mp.get_master_weights(model), mp.get_master_weights(other))
    x, y = _data()
    for m in (model, again, loaded):
        m.train_on_batch(x[:16], y[:16])
    for other in (again, loaded):
        _assert_same(_arrays(optimizer.variables), _arrays(other.optimizer.variables))
        _assert_same(mp.get_master_weights(model), mp.get_master_weights(other))


@pytest.mark.slow  # over 1 s on 2 cores
@pytest.mark.tensorflow_only
def test_a_tf_checkpoint_round_trips_codes_and_scales(tmp_path):
    import tensorflow as tf

    model, optimizer = _train("int8", steps=3)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).write(
        os.fspath(tmp_path / "ckpt"))
    other, other_opt = _train("int8", steps=1, seed=5)
    tf.train.Checkpoint(model=other, optimizer=other_opt).read(path).assert_consumed()
    _assert_same(_arrays(optimizer.variables), _arrays(other_opt.variables))
    _assert_same(mp.get_master_weights(model), mp.get_master_weights(other))


@pytest.mark.slow  # over 1 s on 2 cores
def test_the_state_tree_round_trips_codes_and_scales():
    model, optimizer = _train("int8", steps=3)
    if BACKEND == "tensorflow":  # the masters are no Keras variables there: refused
        with pytest.raises(ValueError, match="CheckpointManager"):
            model.get_state_tree()
        return
    tree = model.get_state_tree()

    def leaves(node, path=""):
        if isinstance(node, dict):
            return [leaf for k, v in node.items() for leaf in leaves(v, f"{path}/{k}")]
        return [(path, node)]

    stored = leaves(tree["optimizer_variables"])
    assert len([p for p, _ in stored if p.endswith("_codes")]) == 8
    assert not any(p.endswith(("_momentum", "_velocity")) for p, _ in stored)
    other = _model()  # the start weights, its state all zero
    other_opt = _optimizer("int8")
    other.compile(optimizer=other_opt, loss="mse", jit_compile=False)
    other_opt.build(other.trainable_variables)
    other.set_state_tree(dict(sorted(tree.items())))  # as Orbax restores it
    _assert_same(_arrays(optimizer.variables), _arrays(other_opt.variables))
    _assert_same(mp.get_master_weights(model), mp.get_master_weights(other))
    x, y = _data()
    for m in (model, other):
        m.train_on_batch(x[:16], y[:16])
    _assert_same(_arrays(optimizer.variables), _arrays(other_opt.variables))
    _assert_same(mp.get_master_weights(model), mp.get_master_weights(other))


_MIRRORED = """
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from tfinit import mixed_precision as mp
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope(), mp.scope("pseudo_fp16", compute_dtype="bfloat16", master="split"):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    optimizer = mp.MasterWeightOptimizer(keras.optimizers.Adam(), state_dtype="int8")
    try:
        optimizer.build(model.trainable_variables)
    except ValueError as error:
        print(error)
"""


@pytest.mark.slow  # a fresh interpreter with two logical CPUs
@pytest.mark.tensorflow_only
def test_int8_state_is_refused_under_a_strategy_of_several_replicas():
    import subprocess
    import sys

    from conftest import REPO

    out = subprocess.run([sys.executable, "-c", _MIRRORED], capture_output=True, text=True,
                         cwd=REPO, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert ("`state_dtype='int8'` does not combine with a tf.distribute strategy of several "
            "replicas (MirroredStrategy, 2 replicas)") in out.stdout, out.stderr[-2000:]
