"""tfinit.caffe2 on the JAX backend: its modules import no TensorFlow, and converted nets
(NCHW CNN, ChannelShuffle/Split/LRN, the char_rnn LSTM) run and match Caffe2 in a process
where TensorFlow cannot be imported."""

import ast
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, "tests")
    import _no_tensorflow
    _no_tensorflow.install()  # tfinit.caffe2 on JAX must not need TensorFlow installed
    import numpy as np
    import keras
    assert keras.backend.backend() == "jax"
    import caffe2_nets as nets
    from tfinit.caffe2 import NetDef, Operator, check_forward, to_keras

    predict, params = nets.cnn()
    x = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32)
    out = np.asarray(to_keras(predict, params, (3, 8, 8))(x))
    assert np.allclose(out, nets.cnn_forward(x, params)["prob"], atol=1e-5)
    net = NetDef(ops=[
        Operator("LRN", ("data",), ("n",), {"size": 3, "alpha": 0.5, "beta": 0.75}),
        Operator("ChannelShuffle", ("n",), ("s",), {"group": 2}),
        Operator("Split", ("s",), ("a", "b"))], external_output=["a", "b"])
    z = np.random.default_rng(2).normal(size=(2, 4, 3, 3)).astype(np.float32)
    a, b = to_keras(net, {}, (4, 3, 3))(z)
    y = nets.channel_shuffle(nets.lrn(z, 3, 0.5, 0.75, 1.0)[0], 2)
    assert np.allclose(np.asarray(a), y[:, :2], atol=1e-5)
    assert np.allclose(np.asarray(b), y[:, 2:], atol=1e-5)
    folder = nets.realmodels_dir()
    report = check_forward(folder / "char_rnn_predict_net.pb", folder / "char_rnn_init_net.pb",
                           folder / "char_rnn_forward.npz")
    assert report.ok, str(report)
    from tfinit.caffe2 import load_into_keras
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="fc1")])
    w = np.array([[1, 2, 3], [4, 5, 6]], "float32")  # Caffe2's FC weight [out, in]
    loaded = load_into_keras(model, {"fc1_w": w, "fc1_b": np.array([0.5, -0.5], "float32")})
    assert loaded.assigned == {"fc1_w": "fc1.kernel", "fc1_b": "fc1.bias"}
    assert np.array_equal(np.asarray(model.get_layer("fc1").kernel), w.T)
    ids = NetDef(ops=[Operator("LengthsToSegmentIds", ("lengths",), ("ids",))],
                 external_output=["ids"])
    try:  # rows that depend on values: refused on JAX, naming the op
        to_keras(ids, {}, ())
        raise AssertionError("a data-dependent net converted on JAX")
    except ValueError as err:
        assert "#0 LengthsToSegmentIds" in str(err) and "static shapes" in str(err), err
    assert "tensorflow" not in sys.modules
    print("JAX-CAFFE2-OK")
    """
)


def test_the_caffe2_modules_import_no_tensorflow():
    for path in sorted((REPO / "tfinit" / "caffe2").glob("*.py")):
        tree = ast.parse(path.read_text())
        names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names]
        names += [node.module or "" for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom)]
        assert not [n for n in names if n.split(".")[0] == "tensorflow"], path.name
        assert not [n for n in names if n.startswith("tfinit.mixed_precision")], path.name


@pytest.mark.slow  # a subprocess
def test_converted_nets_run_on_the_jax_backend():
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "JAX-CAFFE2-OK" in proc.stdout


def test_the_caffe2_code_and_tests_read_nothing_beside_the_repository():
    files = [*sorted((REPO / "tfinit" / "caffe2").glob("*.py")),
             *sorted((REPO / "tests").rglob("*caffe2*.py")), REPO / "tests" / "conftest.py",
             REPO / "notebooks" / "05_caffe2_models.ipynb"]
    for path in files:
        text = path.read_text()
        if path.name == "test_caffe2_jax.py":
            text = text[:text.index("def test_the_caffe2_code_and_tests_read_nothing")]
        for needle in ('"shared"', "'shared'", "../shared", "reference/caffe2", "FACTS.md",
                       "DESIGN.md"):
            assert needle not in text, f"{path.name} mentions {needle}"
