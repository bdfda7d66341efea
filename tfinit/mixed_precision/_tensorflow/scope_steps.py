"""``scope``'s steps on Keras's TensorFlow backend: a variable creator pairs each trainable
floating variable as it is created (Caffe2's PseudoFP16 / ReversePseudoFP16).

Which variables pair up:
- pseudo_fp16: Keras variables requested in the compute dtype (the scope's ``PairPolicy``
  makes every layer constructed inside ask for it) and raw ``tf.Variable``s in float32 or
  the compute dtype. The variable returned is 16-bit; its fp32 master is filled first
  (Keras layers: the initializer runs in float32) and the copy is ``cast(master)``, as
  Caffe2's PseudoFP16Initializer did.
- reverse: trainable float32 variables; the variable returned is fp32 and a 16-bit copy
  rides along. Layers compute in the 16-bit dtype.
- ``master="split"`` (pseudo_fp16, bfloat16): as pseudo_fp16, with an int16 remainder
  variable in place of the fp32 master (``tfinit._split_master``).
- Untouched: non-trainable variables, integer variables, float64, and Keras variables
  requested in float32 in pseudo_fp16 mode (layers explicitly in float32, normalization).

The steps ``tfinit.mixed_precision._scope.scope`` asks of a backend (the same names in
``_keras_variables.scope_steps``): ``check``, ``strategy``, ``creating``, ``after_build``,
``adopt_model`` and ``after_exit``.
"""

import contextlib
import functools


from tfinit import _backend
from tfinit import _keras_internals as internals
from tfinit.initializers import create_pair
from tfinit.parameter_info import without_output_index
from tfinit.mixed_precision._common import pair_kinds, scope_hooks, scope_stack
from tfinit.mixed_precision._common.pair_policy import PairPolicy
from tfinit.mixed_precision._tensorflow import pair_records, paired_variables, save_hooks


def check(spec):
    """Refuse what TensorFlow cannot pair: bfloat16 across MultiWorker workers."""
    tf = _backend.tensorflow("tfinit.mixed_precision.scope")
    if spec.compute_dtype == "bfloat16" and internals.num_workers(
            tf.distribute.get_strategy()) > 1:
        # MWMS broadcasts every variable's initial value with CollectiveBcastSend, which
        # has no bfloat16 kernel: the 16-bit copies could not even be created.
        raise ValueError(
            "tfinit.mixed_precision.scope: compute_dtype='bfloat16' is not supported under "
            "MultiWorkerMirroredStrategy with more than one worker (TensorFlow cannot "
            "broadcast bfloat16 initial values between workers). Use compute_dtype="
            "'float16' there; bfloat16 works under MirroredStrategy."
        )


def strategy():
    """The tf.distribute strategy the scope is entered in (its variables are created there)."""
    return _backend.tensorflow("tfinit.mixed_precision.scope").distribute.get_strategy()


def after_exit():
    """Nothing waits when the scope exits: the variable creator paired as variables came."""
    return None


@contextlib.contextmanager
def creating(state):
    """``state``'s variable creator runs (also under ``tf.init_scope`` in a traced function)."""
    tf = _backend.tensorflow("tfinit.mixed_precision.scope")
    creator = functools.partial(_create, state)
    with contextlib.ExitStack() as creators:
        creators.enter_context(tf.variable_creator_scope(creator))
        if not tf.executing_eagerly():
            # A lazy build inside a traced function (fit's symbolic build): Keras lifts
            # variable creation out with tf.init_scope, whose creator stack is the eager one.
            with tf.init_scope():
                creators.enter_context(tf.variable_creator_scope(creator))
        yield


def _activated(state):
    """``state`` is the innermost scope: its policy is Keras's global one, its creator runs."""
    return scope_hooks.activated(state, creating)


def adopt_model(model):
    """On TensorFlow a pseudo_fp16 master is no Keras variable of the model, so a state tree
    (``get_state_tree``, what Keras's ``OrbaxCheckpoint`` saves) would hold only the 16-bit
    copies: refused for a model with such pairs, naming the routes that keep the masters."""
    if internals.has_object_method(model, "get_state_tree"):
        return
    get_state_tree = model.get_state_tree

    @functools.wraps(get_state_tree)
    def get_state_tree_keeping_masters(*args, **kwargs):
        copies = [v.path for v in model.weights  # (a stochastic pair's weight is its all)
                  if (pair := pair_records.pair_of(v)) is not None and pair.computes_with_copy
                  and not pair.rounds_stochastically]
        if copies:
            raise ValueError(
                f"get_state_tree: variable {copies[0]!r} (and {len(copies) - 1} more) is the "
                "16-bit copy of an fp32 master that is no Keras variable on TensorFlow, so a "
                "state tree (and keras.callbacks.OrbaxCheckpoint) would drop the masters. On "
                "TensorFlow checkpoint with tf.train.CheckpointManager (survives a kill "
                "during a save), keras.callbacks.BackupAndRestore or .weights.h5 files; "
                "Orbax checkpoints keep the masters on the JAX backend.")
        return get_state_tree(*args, **kwargs)

    internals.set_object_method(model, "get_state_tree", get_state_tree_keeping_masters)


def after_build(state, layer):
    """Variables a build left uninitialized (Keras builds inside a stateless scope when it
    traces a model symbolically) are created later by Keras: create them inside ``state``."""
    for variable in internals.uninitialized_variables(layer):
        initialize = internals.deferred_initializer(variable)

        def initialize_in_scope(_initialize=initialize, variable=variable):
            with _activated(state):
                _initialize()
            pair = pair_records.pair_of(variable)
            if pair is not None and pair.computes_with_copy:
                save_hooks.install_layer_hooks(layer)

        internals.set_deferred_initializer(variable, initialize_in_scope)


def _check_strategy(state, tf):
    current = tf.distribute.get_strategy()
    if current is not state.strategy:
        raise ValueError(
            "tfinit.mixed_precision.scope() was entered outside the distribution strategy "
            f"({type(current).__name__}) that is creating this variable: it would create a "
            "separate master per replica. Enter it inside the strategy's scope: "
            "`with strategy.scope(), tfinit.mixed_precision.scope(...): build the model`."
        )


def _create(state, next_creator, **kwargs):
    tf = _backend.tensorflow("tfinit.mixed_precision.scope")
    if kwargs.get("variable_def") is not None or scope_stack.active() is not state:
        # Only the innermost scope pairs (an outer scope's creator is further down the chain).
        return next_creator(**kwargs)
    on_read = kwargs.get("synchronization") == tf.VariableSynchronization.ON_READ
    trainable = kwargs.get("trainable")
    if trainable is None:
        trainable = not on_read
    initial_value = kwargs.get("initial_value")
    owner, initializer = internals.keras_variable_in_creation(initial_value)
    if not trainable and not (state.spec.is_pseudo and owner is not None and not on_read):
        # A layer's own non-trainable float state that Keras asked in the 16-bit dtype
        # (a custom layer's) keeps an fp32 master in pseudo_fp16. Normalization layers and
        # keras.layers.Normalization never get here: their PairPolicy asks for float32.
        return next_creator(**kwargs)
    requested = kwargs.get("dtype")
    value = None
    if requested is None:
        with tf.init_scope():
            value = tf.convert_to_tensor(initial_value() if callable(initial_value)
                                         else initial_value)
        requested = value.dtype
    requested = tf.as_dtype(requested)
    if not requested.is_floating or not pair_kinds.pairs_up(
            state.spec, requested.name, owner, added_to_built_layer=_added_to_built_layer(owner)):
        if value is not None:
            kwargs["initial_value"] = value
        return next_creator(**kwargs)
    _check_strategy(state, tf)
    with tf.init_scope():
        if state.spec.is_pseudo and owner is not None and initializer is not None:
            # Caffe2's PseudoFP16Initializer: fill the fp32 master, the copy is its cast.
            value = _fill_fp32(initializer, owner.shape, tf)
        if value is None:
            value = tf.convert_to_tensor(initial_value() if callable(initial_value)
                                         else initial_value, dtype=requested)
    name = without_output_index(kwargs.get("name") or "Variable")

    def make_variable(**overrides):
        # Keras 3.16 passes `shape`: each variable of a pair takes its own value's shape
        # (a stochastic pair's placeholder is empty).
        merged = dict(kwargs, **overrides)
        merged.pop("shape", None)
        return next_creator(**merged)

    created = create_pair(name, value, state.spec, trainable=trainable,
                          make_variable=make_variable)
    param = created.param
    pair = pair_records.make_pair(owner if owner is not None else param, param.shape,
                            created.blob_copy, name=name, spec=state.spec)
    layer = _owning_layer(owner) if owner is not None else None
    pair.note_layer(layer)
    pair_records.attach(param, pair)
    save_hooks.install_variable_hooks(param)
    if owner is not None:
        paired_variables.adopt(owner)
        if layer is not None:
            _keep_pair_policy(layer, state)
            if pair.computes_with_copy:
                save_hooks.install_layer_hooks(layer)
    return param


def _owning_layer(owner):
    """The layer Keras variable ``owner`` belongs to: the layer being built, or a layer nested
    in it that already tracks ``owner`` (Keras creates a nested layer's variables after its
    build, deferred, in the name scope of the outer layer whose call built it)."""
    building = internals.layer_being_built()
    if building is None:
        return None
    for layer in internals.all_layers(building):
        if any(v is owner for v in internals.own_trainable_variables(layer)):
            return layer
    return building


def _keep_pair_policy(layer, state):
    """A layer rebuilt from a config in a scope gets Keras's policy *name* (Keras's
    ``Layer.from_config`` keeps a deserialized policy by its name); once its variables are
    paired it carries the scope's policy again, so a file saved from it stays tfinit's."""
    if not isinstance(layer.dtype_policy, PairPolicy):
        layer.dtype_policy = state.policy


def _fill_fp32(initializer, shape, tf):
    """The initializer's fp32 values, or None when it only fills the dtype Keras asked for."""
    try:
        value = tf.convert_to_tensor(initializer(shape, dtype="float32"))
    except (TypeError, ValueError, NotImplementedError):
        return None
    return value if value.dtype == tf.float32 else None


def _added_to_built_layer(owner):
    """Whether Keras variable ``owner`` is being added to a layer already built (LoRA's)."""
    if owner is None:
        return False
    layer = internals.layer_being_built()
    return layer is not None and layer.built
