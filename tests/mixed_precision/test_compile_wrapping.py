"""``compile`` wraps wherever users call it, on every backend.

Inside or after the ``with mp.scope(...)`` block; an optimizer object, a string, none (the
compile method's own default: Keras's ``"rmsprop"``); Sequential, functional, subclassed and
reloaded models. Each case asserts the wrapper and the inner optimizer's type and learning
rate, then that ``fit`` moves the masters and leaves every copy ``cast(master)``.
(``strategy.scope()`` and ``keras.distribution``: tests/mixed_precision/
_mixed_precision_mirrored.py and _jax_data_parallel.py; keras-hub tasks: test_keras_hub.py.)
"""

import keras
import numpy as np
import pytest

from tfinit import mixed_precision as mp

pytestmark = pytest.mark.backend_neutral


class Subclassed(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(4, activation="tanh")
        self.out = keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.hidden(x))


def sequential():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(1)])


def functional():
    x = keras.Input((3,))
    return keras.Model(x, keras.layers.Dense(1)(keras.layers.Dense(4, activation="tanh")(x)))


def subclassed():
    model = Subclassed()
    model(np.zeros((1, 3), "float32"))  # built in the scope
    return model


OPTIMIZERS = {  # compile's argument -> (inner optimizer class, learning rate)
    "object": (lambda: {"optimizer": keras.optimizers.SGD(0.05)}, keras.optimizers.SGD, 0.05),
    "string": (lambda: {"optimizer": "adam"}, keras.optimizers.Adam, 1e-3),
    "none": (lambda: {}, keras.optimizers.RMSprop, 1e-3),  # Keras's own default
}


def assert_wrapped_and_trains(model, inner_class, learning_rate):
    assert isinstance(model.optimizer, mp.MasterWeightOptimizer), model.optimizer
    inner = model.optimizer.inner_optimizer
    assert type(inner) is inner_class, inner
    assert float(keras.ops.convert_to_numpy(inner.learning_rate)) == pytest.approx(
        learning_rate)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 1)).astype("float32")
    before = mp.get_master_weights(model)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    after = mp.get_master_weights(model)
    assert all(not np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert mp.replica_mismatches(model) == []


@pytest.mark.slow  # a fit each: over 1 s on 2 cores
@pytest.mark.parametrize("build", [sequential, functional, subclassed])
@pytest.mark.parametrize("inside", [True, False], ids=["inside", "after"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_compile_wraps_inside_or_after_the_block(build, inside, optimizer):
    arguments, inner_class, learning_rate = OPTIMIZERS[optimizer]
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        model = build()
        if inside:
            model.compile(loss="mse", **arguments())
    if not inside:
        model.compile(loss="mse", **arguments())
    assert_wrapped_and_trains(model, inner_class, learning_rate)


def test_auto_scale_loss_false_gives_a_wrapper_without_loss_scaling():
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = sequential()
    model.compile(optimizer="sgd", loss="mse", auto_scale_loss=False)
    assert isinstance(model.optimizer, mp.MasterWeightOptimizer)
    assert model.optimizer.get_config()["loss_scale"] is None
    model.compile(optimizer="sgd", loss="mse")
    assert model.optimizer.get_config()["loss_scale"] is not None  # float16: dynamic


@pytest.mark.slow
def test_reverse_float16_the_keras_loss_scale_wrap_becomes_the_master_wrap():
    """A reverse float16 model's policy is ``mixed_float16``, so Keras's own ``compile`` puts a
    ``LossScaleOptimizer`` around the optimizer inside the block: it becomes
    ``MasterWeightOptimizer`` (dynamic scaling) around the same inner optimizer."""
    with mp.scope("reverse", compute_dtype="float16"):
        model = sequential()
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    assert model.optimizer.get_config()["loss_scale"] is not None
    assert_wrapped_and_trains(model, keras.optimizers.SGD, 0.05)


def test_a_loss_scale_optimizer_the_user_gives_is_left_as_given():
    given = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.05))
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = sequential()
        model.compile(optimizer=given, loss="mse")
    assert model.optimizer is given


@pytest.mark.slow
def test_a_model_reloaded_in_the_scope_wraps_inside_and_after(tmp_path):
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        model = functional()
    model.compile(optimizer="adam", loss="mse")
    path = str(tmp_path / "m.keras")
    model.save(path)
    for inside in (True, False):
        with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
            loaded = keras.saving.load_model(path)
            assert loaded.get_compile_config()  # Keras recompiled it from the file
            if inside:
                loaded.compile(optimizer=keras.optimizers.AdamW(2e-3), loss="mse")
        if not inside:
            loaded.compile(optimizer=keras.optimizers.AdamW(2e-3), loss="mse")
        assert_wrapped_and_trains(loaded, keras.optimizers.AdamW, 2e-3)
