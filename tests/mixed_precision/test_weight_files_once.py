"""Weight files hold each array once (issue 48, items 5 and 6): a ``MasterWeightOptimizer``
stores only its own variables (the inner optimizer's are under its own entry, the masters
under the layers'), so a file is Keras mixed's size but for the loss scale's scalars; files
written before (``tests/data/mixed_precision_before_53``, every slot twice, JAX's masters
twice) still load exactly on either backend; a reload into an unbuilt optimizer gives
Keras's one warning."""

import io
import warnings
import zipfile

import h5py
import keras
import numpy as np
import pytest
from conftest import REPO

from tfinit import mixed_precision as mp

pytestmark = [pytest.mark.backend_neutral, pytest.mark.slow]  # each over 1 s on 2 cores

BEFORE = REPO / "tests" / "data" / "mixed_precision_before_53"
KINDS = {"fp32": ("pseudo_fp16", "float16", "fp32"), "split": ("pseudo_fp16", "bfloat16", "split"),
         "reverse": ("reverse", "float16", "fp32")}
#: the kinds this backend builds (torch refuses master="split")
HERE = sorted(k for k in KINDS if k != "split" or keras.backend.backend() != "torch")


def _model(kind=None):
    layers = [keras.Input((4,)), keras.layers.Dense(3, name="hidden"),
              keras.layers.Dense(2, name="head")]
    if kind is None:
        return keras.Sequential(layers, name="net")
    mode, dtype, master = KINDS[kind]
    with mp.scope(mode, compute_dtype=dtype, master=master):
        return keras.Sequential(layers, name="net")


def _entries(path):
    """{group: number of arrays} of a ``.weights.h5`` file, and the bytes of its arrays."""
    groups, nbytes = {}, 0
    with h5py.File(path) as f:
        def visit(name, obj):
            nonlocal nbytes
            if isinstance(obj, h5py.Dataset):
                group = name.rsplit("/", 1)[0]
                groups[group] = groups.get(group, 0) + 1
                nbytes += obj.nbytes
        f.visititems(visit)
    return groups, nbytes


def _trained(kind, x, y):
    keras.utils.set_random_seed(0)
    model = _model(kind)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", run_eagerly=True)
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("kind", HERE)
def test_a_file_holds_each_array_once(kind, tmp_path, dtype_policy):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 4)).astype("float32"), rng.normal(size=(8, 2)).astype("float32")
    model = _trained(kind, x, y)
    with dtype_policy("mixed_bfloat16"):
        keras.utils.set_random_seed(0)
        oracle = _model()
    oracle.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", run_eagerly=True)
    oracle.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    model.save_weights(tmp_path / "m.weights.h5")
    oracle.save_weights(tmp_path / "k.weights.h5")
    groups, nbytes = _entries(tmp_path / "m.weights.h5")
    keras_groups, keras_bytes = _entries(tmp_path / "k.weights.h5")
    # the inner optimizer's slots once, where Keras mixed's optimizer keeps them
    assert groups.pop("optimizer/vars") == 4  # iterations, learning rate, loss scale, counter
    assert groups.pop("optimizer/inner_optimizer/vars") == keras_groups.pop("optimizer/vars")
    assert groups == keras_groups
    # Keras mixed's bytes, plus the loss scale's two scalars and the wrapper's own two
    assert nbytes - keras_bytes == 16 or nbytes - keras_bytes == 24, (nbytes, keras_bytes)

    # and it loads back exactly, without a warning
    keras.utils.set_random_seed(1)
    other = _model(kind)
    other.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", run_eagerly=True)
    other.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)  # built, other values
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        other.load_weights(tmp_path / "m.weights.h5")
    assert not [w for w in caught if "Skipping variable" in str(w.message)], caught
    for a, b in zip(mp.get_master_weights(other), mp.get_master_weights(model), strict=True):
        assert a.tobytes() == b.tobytes()
    for a, b in zip(other.optimizer.variables, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)


def test_a_reload_into_an_unbuilt_optimizer_warns_once_as_keras_mixed(tmp_path, dtype_policy):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 4)).astype("float32"), rng.normal(size=(8, 2)).astype("float32")
    _trained("fp32", x, y).save_weights(tmp_path / "m.weights.h5")
    fresh = _model("fp32")
    fresh.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", run_eagerly=True)  # unbuilt
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh.load_weights(tmp_path / "m.weights.h5")
    skipped = [str(w.message) for w in caught if "Skipping variable" in str(w.message)]
    assert len(skipped) == 1, skipped
    assert f"optimizer '{fresh.optimizer.inner_optimizer.name}'" in skipped[0]


def _expected(name):
    with np.load(BEFORE / f"{name}.npz") as data:
        def ordered(prefix):
            keys = [k for k in data.files if k.startswith(prefix)]
            return [data[k] for k in sorted(keys, key=lambda k: int(k.rsplit("_", 1)[1]))]

        return ordered("master_"), ordered("optimizer_"), data["x"], data["y"]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
@pytest.mark.parametrize("kind", HERE)
def test_a_file_written_before_loads_masters_and_state_exactly(backend, kind):
    name = f"{backend}_{kind}"
    with zipfile.ZipFile(BEFORE / f"{name}.keras") as archive, h5py.File(
            io.BytesIO(archive.read("model.weights.h5"))) as f:  # the duplicates are there
        assert len(f["optimizer/vars"]) == 4 + 10 + (4 if backend == "jax" else 0)
    masters, state, x, y = _expected(name)
    mode, dtype, master = KINDS[kind]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mp.scope(mode, compute_dtype=dtype, master=master):
            model = keras.saving.load_model(BEFORE / f"{name}.keras")
    assert not [w for w in caught if "Skipping variable" in str(w.message)], caught
    for have, want in zip(mp.get_master_weights(model), masters, strict=True):
        assert have.dtype == want.dtype and have.tobytes() == want.tobytes()
    opt = model.optimizer
    have = [opt.iterations, opt.step_counter, opt.dynamic_scale, *opt.inner_optimizer.variables]
    assert len(have) == len(state) == 13
    for h, w in zip(have, state, strict=True):
        assert np.asarray(h).astype(w.dtype).tobytes() == w.tobytes(), h.path
    assert int(opt.iterations) == 2
    model.run_eagerly = True
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)  # trains on
    assert int(opt.iterations) == 4
