"""The fills run on the JAX backend (keras.ops / keras.random only)."""

import os
import subprocess
import sys
import textwrap

from conftest import REPO

SCRIPT = textwrap.dedent(
    """
    import math
    import numpy as np
    import keras
    import tfinit
    assert keras.backend.backend() == "jax"
    import jax

    x = tfinit.XavierFill(seed=1)((128, 256))
    assert isinstance(x, jax.Array) and x.dtype == np.float32
    limit = math.sqrt(3 / 128)
    v = np.asarray(x)
    assert np.abs(v).max() <= np.float32(limit) and np.abs(v).max() > limit * (1 - 20 / v.size)
    m = np.asarray(tfinit.MSRAFill(seed=1)((128, 256)))
    std = math.sqrt(2 / 256)
    assert abs(m.std() - std) < 6 * std / math.sqrt(2 * m.size)
    assert np.array_equal(np.asarray(tfinit.XavierFill(seed=1)((4, 4))), np.asarray(tfinit.XavierFill(seed=1)((4, 4))))
    assert tfinit.GaussianFill(seed=2)((8,), dtype="bfloat16").dtype == "bfloat16"
    assert sorted(np.asarray(tfinit.UniqueUniformFill(0, 9, seed=3)((10,))).tolist()) == list(range(10))
    d = np.asarray(tfinit.DiagonalFill(1.0, layout="caffe2")((7, 5)))
    assert d[6, 0] == 1 and d.sum() == 6
    layer = keras.layers.Dense(3, kernel_initializer="MSRAFill")
    layer.build((None, 5))
    try:
        tfinit.GivenTensorInt64Fill([1, 2])((2,))
    except ValueError as err:
        assert "jax_enable_x64" in str(err) and "GivenTensorInt64Fill" in str(err)
    else:
        raise AssertionError("int64 on JAX without x64 must be refused")
    print("JAX-OK")
    """
)


def test_fills_on_the_jax_backend():
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    env.pop("JAX_ENABLE_X64", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "JAX-OK" in proc.stdout
