"""What ``scope`` does to Keras on every backend: the active scope's dtype policy, and the
hooks it leaves on the layers and models constructed inside (no TensorFlow here).

``scope`` (``tfinit.mixed_precision._scope``) passes in what differs: the
``MasterWeightOptimizer`` class, and from the chosen backend's ``scope_steps`` the context its
variables are created in (TensorFlow: the variable creator), what follows a layer's late
build and what a model constructed inside gets.
"""

import contextlib
import functools
import inspect

import keras

from tfinit import _keras_internals as internals
from tfinit.mixed_precision._common import pair_policy
from tfinit.mixed_precision._common import scope_stack


@contextlib.contextmanager
def activated(state, creating=contextlib.nullcontext):
    """``state`` is the innermost scope: its policy is Keras's global one, and the backend's
    ``creating(state)`` context is entered (TensorFlow: the variable creator)."""
    previous_policy = keras.config.dtype_policy()
    scope_stack.push(state)
    try:
        keras.config.set_dtype_policy(state.policy)
        with creating(state):
            yield
    finally:
        keras.config.set_dtype_policy(previous_policy)
        scope_stack.pop(state)


def adopt_constructed_layers(state, optimizer_class, after_build, creating=contextlib.nullcontext,
                             adopt_model=None):
    """Each model constructed (or loaded) in ``state`` trains its masters with
    ``optimizer_class`` whatever ``compile`` gave it (``adopt_optimizer``: now, for a model
    compiled inside the ``with`` block or by its own constructor, as keras-hub tasks are;
    after each later ``compile``), and gets ``adopt_model(model)``; each layer constructed in
    it and not built yet builds inside it (``activated(state, creating)``), then
    ``after_build(state, layer)`` runs."""
    for layer in pair_policy.layers_to_pair(state.policy):
        if isinstance(layer, keras.Model):
            wrap_compile(layer, optimizer_class)
            adopt_optimizer(layer, optimizer_class)
            if adopt_model is not None:
                adopt_model(layer)
        if layer.built:
            continue
        build = layer.build

        @functools.wraps(build)
        def build_in_scope(*args, _build=build, layer=layer, **kwargs):
            if scope_stack.active() is state:
                return _build(*args, **kwargs)
            with activated(state, creating):
                result = _build(*args, **kwargs)
            after_build(state, layer)
            return result

        internals.set_object_method(layer, "build", build_in_scope)


def wrap_compile(model, optimizer_class):
    """After each ``model.compile``, ``adopt_optimizer`` puts ``optimizer_class``
    (``MasterWeightOptimizer``) around the optimizer ``compile`` chose, whatever it was given:
    an optimizer, a string, the compile method's own default (keras-hub's ``"auto"``: Adam(2e-5)
    for a causal LM; Keras's ``"rmsprop"``) or ``auto_scale_loss=False`` (then no loss
    scaling)."""
    if internals.has_object_method(model, "compile"):
        return
    compile_model = model.compile
    signature = inspect.signature(compile_model)

    @functools.wraps(compile_model)
    def compile_with_masters(*args, **kwargs):
        result = compile_model(*args, **kwargs)
        arguments = signature.bind(*args, **kwargs).arguments
        extra = next((arguments[p.name] for p in signature.parameters.values()
                      if p.kind is inspect.Parameter.VAR_KEYWORD and p.name in arguments), {})
        auto_scale_loss = arguments.get("auto_scale_loss", extra.get("auto_scale_loss", True))
        adopt_optimizer(model, optimizer_class, auto_scale_loss=auto_scale_loss)
        return result

    internals.set_object_method(model, "compile", compile_with_masters)


def adopt_optimizer(model, optimizer_class, auto_scale_loss=True):
    """A compiled ``model``'s plain Keras optimizer becomes ``optimizer_class(optimizer)``, as
    Keras's ``compile`` wraps one in ``LossScaleOptimizer`` under ``mixed_float16``
    (``auto_scale_loss=False``: a wrapper without loss scaling); so does the inner optimizer
    of the ``LossScaleOptimizer`` Keras's ``compile`` made (a reverse float16 model's policy
    is ``mixed_float16``). A ``LossScaleOptimizer`` the user handed ``compile`` is left as
    given: its first step refuses the paired variables."""
    current = getattr(model, "optimizer", None)
    if current is None or isinstance(current, optimizer_class):
        return
    scaling = {} if auto_scale_loss else {"loss_scale": None}
    if isinstance(current, keras.optimizers.LossScaleOptimizer):
        if current is internals.compiled_optimizer(model):
            return
        current, scaling = current.inner_optimizer, {}
    if current.built:
        # Only a step the paired variables refused (fit inside the `with` block) builds a
        # plain optimizer here: it holds no state, and its slots are the copies'.
        current = type(current).from_config(current.get_config())
        model.train_function = None  # traced with that optimizer; `compile` resets it so too
    wrapped = optimizer_class(current, **scaling)
    model.optimizer = wrapped
    internals.set_compiled_optimizer(model, wrapped)
