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
