"""What ``scope`` does to Keras on every backend: the active scope's dtype policy, and the
hooks it leaves on the layers and models constructed inside (no TensorFlow here).

Each backend's ``scope`` (``_creator`` on TensorFlow, ``_jax_scope`` on JAX and torch) passes
in what differs: its ``MasterWeightOptimizer`` class, the context its variables are created
in (TensorFlow: the variable creator), and what follows a layer's late build.
"""

import contextlib
import functools
import inspect

import keras

from tfinit import _keras_internals as internals
from tfinit.mixed_precision import _state


@contextlib.contextmanager
def activated(state, creating=contextlib.nullcontext):
    """``state`` is the innermost scope: its policy is Keras's global one, and the backend's
    ``creating(state)`` context is entered (TensorFlow: the variable creator)."""
    previous_policy = keras.config.dtype_policy()
    _state.push(state)
    try:
        keras.config.set_dtype_policy(state.policy)
        with creating(state):
            yield
    finally:
        keras.config.set_dtype_policy(previous_policy)
        _state.pop(state)


def adopt_constructed_layers(state, optimizer_class, after_build, creating=contextlib.nullcontext,
                             adopt_model=None):
    """Each model constructed in ``state`` wraps a plain optimizer in ``optimizer_class`` in
    ``compile`` (and gets ``adopt_model(model)``); each layer constructed in it and not built
    yet builds inside it (``activated(state, creating)``), then ``after_build(state, layer)``
    runs."""
    for layer in internals.layers_holding(state.policy):
        if isinstance(layer, keras.Model):
            wrap_compile(layer, optimizer_class)
            if adopt_model is not None:
                adopt_model(layer)
        if layer.built:
            continue
        build = layer.build

        @functools.wraps(build)
        def build_in_scope(*args, _build=build, layer=layer, **kwargs):
            if _state.active() is state:
                return _build(*args, **kwargs)
            with activated(state, creating):
                result = _build(*args, **kwargs)
            after_build(state, layer)
            return result

        internals.set_object_method(layer, "build", build_in_scope)


def wrap_compile(model, optimizer_class):
    """``model.compile`` wraps a plain Keras optimizer in ``optimizer_class``
    (``MasterWeightOptimizer``), as Keras's ``compile`` wraps one in ``LossScaleOptimizer``
    under ``mixed_float16`` (``auto_scale_loss=False``: a wrapper without loss scaling). A
    Keras ``LossScaleOptimizer`` is left as given: its first step refuses the paired
    variables."""
    if internals.has_object_method(model, "compile"):
        return
    compile_model = model.compile
    signature = inspect.signature(compile_model)

    @functools.wraps(compile_model)
    def compile_with_masters(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        optimizer = bound.arguments.get("optimizer", "rmsprop")
        if optimizer is not None:
            optimizer = keras.optimizers.get(optimizer)
            if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
                scaling = {} if bound.arguments.get("auto_scale_loss", True) else {
                    "loss_scale": None}
                optimizer = optimizer_class(optimizer, **scaling)
            bound.arguments["optimizer"] = optimizer
        return compile_model(*bound.args, **bound.kwargs)

    internals.set_object_method(model, "compile", compile_with_masters)
