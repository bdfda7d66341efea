"""tfinit._backend: the code that differs by Keras backend (this file also runs on JAX)."""

import pytest

from tfinit import _backend

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it


def _matmul_precision():
    """The active backend's float32 product setting, as the backend reports it."""
    if _backend.name() == "jax":
        import jax

        return jax.config.jax_default_matmul_precision
    if _backend.name() == "tensorflow":
        import tensorflow as tf

        return tf.config.experimental.tensor_float_32_execution_enabled()
    pytest.skip(f"no float32 precision setting on the {_backend.name()} backend")


FULL = {"jax": "highest", "tensorflow": False}


def test_full_float32_matmuls_turns_tf32_off_inside_and_restores_it():
    before = _matmul_precision()
    with _backend.full_float32_matmuls():
        assert _matmul_precision() == FULL[_backend.name()]
    assert _matmul_precision() == before


def test_full_float32_matmuls_restores_the_setting_after_an_error():
    before = _matmul_precision()
    with pytest.raises(RuntimeError, match="inside"):
        with _backend.full_float32_matmuls():
            raise RuntimeError("inside the block")
    assert _matmul_precision() == before


def test_check_forward_runs_the_net_in_full_float32(monkeypatch):
    from importlib import resources

    from tfinit.caffe2 import check_forward

    seen = []
    real = _backend.full_float32_matmuls

    def recording():
        seen.append(_matmul_precision())
        return real()

    monkeypatch.setattr(_backend, "full_float32_matmuls", recording)
    folder = resources.files("tfinit.caffe2") / "examples"
    report = check_forward(folder / "mlp_predict_net.pb", folder / "mlp_init_net.pb",
                           folder / "mlp_forward.npz")
    assert report.ok, str(report)
    assert len(seen) == 1  # the one forward pass ran inside the block


@pytest.mark.tensorflow_only
def test_dense_gradient_scatters_tensorflow_indexed_slices(tf):
    sparse = tf.IndexedSlices(values=tf.constant([[1.0, 2.0], [3.0, 4.0]]),
                              indices=tf.constant([2, 0]), dense_shape=tf.constant([3, 2]))
    dense = _backend.dense_gradient(sparse)
    assert not isinstance(dense, tf.IndexedSlices)
    assert dense.numpy().tolist() == [[3.0, 4.0], [0.0, 0.0], [1.0, 2.0]]


def test_dense_gradient_leaves_a_dense_gradient_as_it_is():
    import numpy as np

    gradient = np.ones([2, 2], "float32")
    assert _backend.dense_gradient(gradient) is gradient


@pytest.mark.tensorflow_only
def test_caffe2_momentum_sgd_takes_an_embeddings_sparse_gradient_as_its_dense_form(tf):
    """Caffe2 rejected sparse gradients; an Embedding's is densified, so the update is the
    dense one bit for bit (the unread rows get the momentum step of a zero gradient)."""
    from tfinit import mixed_precision as mp

    sparse = tf.IndexedSlices(values=tf.constant([[0.5, -1.0]]), indices=tf.constant([1]),
                              dense_shape=tf.constant([3, 2]))
    results = []
    for gradient in (sparse, tf.convert_to_tensor(sparse)):
        variable = tf.Variable(tf.ones([3, 2]))
        opt = mp.Caffe2MomentumSGD(0.1, momentum=0.9)
        for _ in range(2):
            opt.apply_gradients([(gradient, variable)])
        results.append(variable.numpy())
    assert results[0].tobytes() == results[1].tobytes()
    assert results[0][0].tolist() == [1.0, 1.0] and results[0][1].tolist() != [1.0, 1.0]
