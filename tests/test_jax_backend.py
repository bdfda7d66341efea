"""tfinit on the JAX backend: no TensorFlow imported, the Keras-level parts work, and the
TensorFlow-only parts say that they need the TensorFlow backend.

The script runs in a fresh interpreter with ``KERAS_BACKEND=jax`` (JAX's default 32-bit
mode) twice: with TensorFlow installed, where tfinit must leave it unimported, and with
``import tensorflow`` blocked, as for a user who never installed it (Keras's own ``.keras``
saving imports TensorFlow whenever it can, so the file round trip is checked there).
``.ci/run`` also runs the fills, initializers and serialization tests under JAX.
"""

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

SCRIPT = textwrap.dedent(
    """
    import importlib.abc
    import math
    import sys

    if sys.argv[1] == "without-tensorflow":

        class NoTensorFlow(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "tensorflow":
                    raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")

        sys.meta_path.insert(0, NoTensorFlow())

    import keras
    import numpy as np

    import tfinit
    from tfinit import *  # noqa: F403 - __all__ holds no TensorFlow-only name here
    assert mixed_precision is tfinit.mixed_precision  # noqa: F405
    import tfinit.caffe2
    assert keras.backend.backend() == "jax"
    assert "tensorflow" not in sys.modules, "import tfinit loaded TensorFlow"
    assert "distribute" not in tfinit.__all__ and "XavierFill" in tfinit.__all__
    assert "mixed_precision" in tfinit.__all__  # it runs on JAX: imported with tfinit
    import jax

    # The fills: values, seeds, dtypes.
    x = tfinit.XavierFill(seed=1)((128, 256))
    assert isinstance(x, jax.Array) and x.dtype == np.float32
    limit = math.sqrt(3 / 128)
    v = np.asarray(x)
    assert np.abs(v).max() <= np.float32(limit) and np.abs(v).max() > limit * (1 - 20 / v.size)
    m = np.asarray(tfinit.MSRAFill(seed=1)((128, 256)))
    std = math.sqrt(2 / 256)
    assert abs(m.std() - std) < 6 * std / math.sqrt(2 * m.size)
    same = [np.asarray(tfinit.XavierFill(seed=1)((4, 4))) for _ in range(2)]
    assert np.array_equal(*same)
    assert tfinit.GaussianFill(seed=2)((8,), dtype="bfloat16").dtype == "bfloat16"
    unique = np.asarray(tfinit.UniqueUniformFill(0, 9, seed=3)((10,)))
    assert sorted(unique.tolist()) == list(range(10))
    d = np.asarray(tfinit.DiagonalFill(1.0, layout="caffe2")((7, 5)))
    assert d[6, 0] == 1 and d.sum() == 6
    caffe2_stream = np.asarray(tfinit.UniformFill(-2.0, 3.0, seed=7, rng="caffe2")((3,)))
    assert caffe2_stream.dtype == np.float32 and np.all((-2 <= caffe2_stream) & (caffe2_stream < 3))
    try:
        tfinit.GivenTensorInt64Fill([1, 2])((2,))
    except ValueError as err:
        assert "jax_enable_x64" in str(err) and "GivenTensorInt64Fill" in str(err)
    else:
        raise AssertionError("int64 on JAX without x64 must be refused")

    # The registry: bare Caffe2 names and brew tuples as Keras initializers.
    layer = keras.layers.Dense(3, kernel_initializer="MSRAFill", bias_initializer="ConstantFill")
    layer.build((None, 5))
    assert layer.kernel.shape == (5, 3) and not np.asarray(layer.bias).any()
    assert isinstance(tfinit.get(("GaussianFill", {"std": 0.01})), tfinit.GaussianFill)

    # The initializer family's Keras classes.
    init = tfinit.Initializer("ConstantFill", value=0.25)
    assert np.asarray(init((2, 2))).tolist() == [[0.25, 0.25], [0.25, 0.25]]
    pseudo = tfinit.PseudoFP16Initializer("GaussianFill", seed=2)
    try:
        pseudo((4, 4))  # as a Keras initializer it needs mixed_precision.scope
    except RuntimeError as error:
        assert "outside a mixed-precision scope" in str(error), error
    else:
        raise AssertionError("PseudoFP16Initializer drew outside a scope")
    brew = tfinit.update_initializer(None, None, ("XavierFill", {"seed": 4}))
    assert np.asarray(brew((3, 2))).shape == (3, 2)
    info = tfinit.ParameterInfo(layer.kernel, (5, 3))
    assert info.dtype == "float32" and info.size == 15 and info.blob_copy is None

    # Caffe2 NetDef reading and init-net replay (the example nets shipped in the package).
    import os
    examples = os.path.join(os.path.dirname(tfinit.caffe2.__file__), "examples")
    blobs = tfinit.caffe2.load_init_net(os.path.join(examples, "mlp_init_net.pb"))
    assert "fc1_w" in blobs and np.asarray(blobs["fc1_w"]).ndim == 2
    assert "tensorflow" not in sys.modules, "a backend-neutral path loaded TensorFlow"

    # The TensorFlow-only parts refuse, naming the backend, before loading TensorFlow.
    def refusal(call):
        try:
            call()
        except RuntimeError as err:
            return str(err)
        raise AssertionError(f"{call} should need the TensorFlow backend")

    for message in (
        refusal(lambda: tfinit.distribute),
        refusal(lambda: tfinit.Initializer("XavierFill").create_param("w", [2, 2])),
        refusal(lambda: tfinit.ExternalInitializer({"w": np.ones(2)}).create_param("w", [2])),
    ):
        assert "needs the TensorFlow backend" in message and "'jax'" in message, message
    assert "tensorflow" not in sys.modules, "a refusal loaded TensorFlow"
    # tfinit.mixed_precision runs on JAX without TensorFlow
    # (docs/mixed-precision.md#on-kerass-jax-backend).
    with tfinit.mixed_precision.scope("pseudo_fp16", compute_dtype="bfloat16"):
        paired = keras.layers.Dense(2)
        paired.build((None, 3))
    assert paired.kernel.dtype == "bfloat16"
    assert tfinit.mixed_precision.parameter_info(paired.kernel).blob_copy["float32"] is not None
    assert "tensorflow" not in sys.modules, "tfinit.mixed_precision loaded TensorFlow"

    # Serialization: a .keras file keeps the tfinit initializers and their seeded values.
    import tempfile
    inputs = keras.Input((6,))
    out = keras.layers.Dense(4, kernel_initializer=tfinit.XavierFill(seed=1))(inputs)
    model = keras.Model(inputs, out)
    path = os.path.join(tempfile.mkdtemp(), "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.layers[1].kernel_initializer) is tfinit.XavierFill
    rebuilt = keras.Model.from_config(loaded.get_config())
    assert np.array_equal(rebuilt.layers[1].get_weights()[0], model.layers[1].get_weights()[0])
    print("JAX-OK")
    """
)


@pytest.mark.slow  # a subprocess
@pytest.mark.parametrize("tensorflow", ["with-tensorflow", "without-tensorflow"])
def test_tfinit_on_the_jax_backend_never_imports_tensorflow(tensorflow):
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    env.pop("JAX_ENABLE_X64", None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, tensorflow],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "JAX-OK" in proc.stdout
