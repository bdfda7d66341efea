"""Every private Keras / TensorFlow touchpoint of tfinit, in one place.

Each function stands in for a public behaviour that Keras or TensorFlow does not (yet)
expose; its first comment line names that behaviour. ``tests/test_keras_internals.py`` holds
one contract test per function: when a Keras or TensorFlow release moves one of these, that
test fails with a message naming the versions, instead of a training run losing masters.

Nothing here replaces a Keras or TensorFlow class or function: overrides are set on single
objects that tfinit itself created or was handed (per-object attributes), never on classes.
"""

import gc
import os
import sys

import keras
from keras.src.backend.common import global_state
from keras.src.backend.common.variables import get_autocast_scope


def _tensorflow():
    # TensorFlow is imported by the entries that need it, not with this module: the Keras
    # entries serve tfinit.caffe2 on JAX, where TensorFlow need not be installed.
    import tensorflow

    return tensorflow


def versions():
    """``"Keras x, TensorFlow y"`` (TensorFlow: ``"not installed"`` when it is not)."""
    try:
        tf_version = _tensorflow().__version__
    except ImportError:
        tf_version = "not installed"
    return f"Keras {keras.__version__}, TensorFlow {tf_version}"


# ------------------------------------------------------------------ Keras identifiers


def register_initializer_name(cls):
    # Public stand-in: `keras.saving.get_custom_objects()[name] = cls`, which made a bare name
    # a Keras identifier up to Keras 3.15 (`keras.initializers.get` deserialized strings with
    # the custom objects). From Keras 3.16 `get` looks a string up in Keras's own table only
    # (keras/src/initializers/__init__.py, ALL_OBJECTS_DICT), which no public API extends.
    """Make ``cls.__name__`` a string identifier of ``keras.initializers.get``.

    Returns whether Keras's table took it (False: this Keras has no such table; a bare name
    then resolves only where Keras still reads the custom objects)."""
    from keras.src import initializers

    table = getattr(initializers, "ALL_OBJECTS_DICT", None)
    if not isinstance(table, dict):
        return False
    table.setdefault(cls.__name__, cls)  # never shadows one of Keras's own names
    return table[cls.__name__] is cls


# ------------------------------------------------------------------ Keras variables


def backend_variable(variable):
    # Public stand-in: none; `keras.Variable.value` is the tf.Variable only outside autocast.
    """The ``tf.Variable`` behind a Keras variable (or the variable itself)."""
    if isinstance(variable, keras.Variable):
        return variable._value
    return variable


def keras_variable_in_creation(initial_value):
    # Public stand-in: none; a tf.variable_creator_scope sees no Keras variable or initializer.
    """The Keras variable being created (and its initializer, when it has one), or None.

    Keras's TF backend calls ``tf.Variable(lambda: initializer(shape, dtype), ...)`` from
    ``Variable._initialize_with_initializer``; the lambda's closure holds the Keras variable
    and the initializer. A Keras variable made from a value is found on the call stack.
    """
    code = getattr(initial_value, "__code__", None)
    if code is not None and "_initialize_with_initializer" in getattr(
            initial_value, "__qualname__", ""):
        cells = dict(zip(code.co_freevars, initial_value.__closure__ or (), strict=True))
        try:
            owner, initializer = (cells["self"].cell_contents,
                                  cells["initializer"].cell_contents)
        except (KeyError, ValueError):
            owner, initializer = None, None
        if isinstance(owner, keras.Variable):
            return owner, initializer
    frame = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            break
        if frame.f_code.co_name == "_initialize" and isinstance(
                frame.f_locals.get("self"), keras.Variable):
            return frame.f_locals["self"], None
        frame = frame.f_back
    return None, None


def uninitialized_variables(layer):
    # Public stand-in: none; Keras defers creating a variable built inside a stateless scope
    # (symbolic tracing) until `Variable._deferred_initialize`, with no public sign of it.
    """The variables of ``layer`` that Keras has not created yet (deferred initialization)."""
    return [v for v in layer.weights if getattr(v, "_value", True) is None]


def deferred_initializer(variable):
    # Public stand-in: none; the method Keras calls to create a deferred variable.
    """The bound method Keras calls to create ``variable`` later."""
    return variable._deferred_initialize


def autocasts(variable):
    # Public stand-in: none; `keras.Variable(autocast=...)` cannot be read back publicly.
    """Whether Keras casts ``variable`` to the compute dtype inside layer calls."""
    return bool(variable._autocast)


def make_instance_of(variable, subclass):
    # Public stand-in: none; Keras has no hook to choose the class of a layer's variables.
    """Turn one Keras variable into an instance of ``subclass`` (a layout-compatible subclass).

    Only this object changes; ``keras.Variable`` and its backend class are untouched.
    """
    if type(variable) is not subclass:
        variable.__class__ = subclass


class HookedKerasVariable(keras.Variable):
    # Public stand-in: none. Inside a layer call Keras reads a variable through
    # `Variable._maybe_autocast` (casting it under a mixed policy) with no hook to serve a
    # cached cast or to choose the dtype its gradient comes back in.
    """A Keras variable whose subclasses may serve the reads made inside layer calls."""

    def layer_read(self, tf_var, autocast_dtype):
        """The value a layer call reads for ``tf_var``, or None for Keras's own read.

        ``autocast_dtype`` is the dtype Keras's autocast would cast to, or None.
        """
        return None

    def _maybe_autocast(self, value):
        if self._autocast and value is self._value and in_layer_call():
            scope = get_autocast_scope()
            read = self.layer_read(value, scope.dtype if scope is not None else None)
            if read is not None:
                return read
        return super()._maybe_autocast(value)


class WideningKerasVariable(keras.Variable):
    # Public stand-in: none. Inside a layer call Keras reads a variable through
    # `Variable._maybe_autocast` (also the value a `StatelessScope` holds for it, on JAX),
    # with no hook to give a layer that does not autocast a wider read.
    """A Keras variable whose subclasses may serve a float32 read inside layer calls (JAX,
    torch)."""

    def wide_layer_read(self, value):
        """The float32 value a layer call reads for ``value`` (this variable's value, or the
        one a stateless scope holds for it), or None for Keras's own read."""
        return None

    def _maybe_autocast(self, value):
        if self._autocast and in_layer_call():
            read = self.wide_layer_read(value)
            if read is not None:
                return read
        return super()._maybe_autocast(value)


def keras_tensor_origin(tensor):
    # Public stand-in: `Layer.input` names only the inputs of a layer's first call; which call
    # produced a symbolic tensor is recorded only in its `_keras_history`.
    """``(layer, inputs)``: the layer whose call produced the symbolic ``tensor`` and the
    input tensors of that call; ``(None, ())`` for a model input or a non-symbolic tensor."""
    history = getattr(tensor, "_keras_history", None)
    if history is None:
        return None, ()
    layer = history.operation
    nodes = getattr(layer, "_inbound_nodes", [])
    if history.node_index >= len(nodes):
        return layer, ()
    return layer, tuple(nodes[history.node_index].input_tensors)


def in_layer_call():
    # Public stand-in: none; Keras records the call context of the layer being called.
    """Whether a Keras layer's ``call`` is running (in this thread)."""
    return global_state.get_global_attribute("current_call_ctx") is not None


def called_inside_another_layer(layer):
    # Public stand-in: none; Keras's call context records the outermost layer being called.
    """Whether ``layer`` is being called from inside another layer's call (not the entry)."""
    context = global_state.get_global_attribute("current_call_ctx")
    return context is not None and context.entry_layer is not layer


def layer_being_built():
    # Public stand-in: none; Keras opens `name_scope(layer.name, caller=layer)` around build
    # and add_weight, and that caller is the only record of which layer is building.
    """The innermost Keras layer whose name scope is open (the layer building now), or None."""
    stack = global_state.get_global_attribute("name_scope_stack") or []
    for entry in reversed(stack):
        caller = getattr(entry, "caller", None)
        if isinstance(caller, keras.layers.Layer):
            return caller
    return None


def all_layers(layer):
    # Public stand-in: `Model.layers` lists only the top level; Keras saving walks them all.
    """``layer`` and every layer nested in it, each once."""
    return list(layer._flatten_layers(include_self=True, recursive=True))


def layers_holding(policy):
    # Public stand-in: none; Keras has no hook on layer construction. The layers constructed
    # while `policy` was the global dtype policy are exactly the objects that refer to it.
    """The Keras layers whose dtype policy is the object ``policy``."""
    found = []
    referrers = gc.get_referrers(policy)
    dicts = [r for r in referrers if isinstance(r, dict)]
    candidates = [r for r in referrers if isinstance(r, keras.layers.Layer)]
    if dicts:
        candidates += [o for o in gc.get_referrers(*dicts)
                       if isinstance(o, keras.layers.Layer)]
    seen = set()
    for layer in candidates:
        if id(layer) not in seen and getattr(layer, "_dtype_policy", None) is policy:
            seen.add(id(layer))
            found.append(layer)
    return found


def models_compiled_with(optimizer):
    # Public stand-in: none; an optimizer does not know the model it was compiled with, whose
    # dtype policy decides Keras's own loss scaling (`Model.compile(auto_scale_loss=True)`).
    # `compile` stores it as the model's attribute `optimizer`: the models found by identity.
    """The Keras models whose ``optimizer`` attribute is the object ``optimizer``."""
    referrers = gc.get_referrers(optimizer)
    dicts = [r for r in referrers if isinstance(r, dict)]
    candidates = [r for r in referrers if isinstance(r, keras.Model)]
    if dicts:
        candidates += [o for o in gc.get_referrers(*dicts) if isinstance(o, keras.Model)]
    found, seen = [], set()
    for model in candidates:
        if id(model) not in seen and getattr(model, "optimizer", None) is optimizer:
            seen.add(id(model))
            found.append(model)
    return found


def set_object_method(obj, name, function):
    # Public stand-in: none; a per-object override of one method of one object tfinit
    # created or was handed (the class and every other instance are untouched).
    """Set ``obj.<name>`` to ``function`` on that object alone; returns what it had."""
    previous = getattr(obj, name)
    object.__setattr__(obj, name, function)
    return previous


def has_object_method(obj, name):
    # Public stand-in: none; whether `obj` carries its own override of method `name`.
    """Whether ``obj.<name>`` was set on the object itself (not found on its class)."""
    return name in vars(obj)


def unset_object_method(obj, name):
    # Public stand-in: none; drops a per-object override so the class's method applies again.
    """Remove the override of ``name`` that was set on ``obj`` itself, if any."""
    vars(obj).pop(name, None)


def carry_weight_decay_exclusions(optimizer, variable_pairs):
    # Public stand-in: `Optimizer.exclude_from_weight_decay(var_list=...)` replaces the
    # exclusions (it cannot add one) and keys them by variable object; there is no public
    # way to ask which variables were excluded.
    """Exclude each ``new`` from ``optimizer``'s weight decay when ``old`` is excluded.

    ``variable_pairs`` holds ``(old, new)`` variables; name patterns need no carrying (a
    master's name is its paired variable's).
    """
    excluded = getattr(optimizer, "_exclude_from_weight_decay", None)
    if not excluded:
        return
    keys = set(excluded)
    for old, new in variable_pairs:
        if optimizer._var_key(old) in excluded:
            keys.add(optimizer._var_key(new))
    optimizer._exclude_from_weight_decay = keys
    optimizer._exclude_from_weight_decay_cache = {}


# ------------------------------------------------------------------ TensorFlow


def distributed_container(variable):
    # Public stand-in: none; a replica's component does not name its distributed variable.
    """The distributed variable that ``variable`` is a component of, or None."""
    container = getattr(variable, "_distributed_container", None)
    return container() if container is not None else None


def owning_strategy(variable):
    # Public stand-in: `DistributedVariable.distribute_strategy` is public, but a plain
    # tf.Variable has no such attribute; both carry `_distribute_strategy` (None for a plain one).
    """The ``tf.distribute`` strategy that created the distributed ``variable``, or None."""
    return getattr(variable, "_distribute_strategy", None)


def num_workers(strategy):
    # Public stand-in: none; MultiWorkerMirroredStrategy's worker count (its cluster resolver
    # gives it only when the cluster spec is set, not for every strategy).
    """How many workers ``strategy`` spans (1 for single-worker strategies)."""
    return getattr(strategy.extended, "_num_workers", 1)


def checkpoint_through(variable, serialize, restore):
    # Public stand-in: none; TensorFlow's Trackable checkpoint protocol is the pair of methods
    # `_serialize_to_tensors` / `_restore_from_tensors`, set here on one variable object.
    """Make ``tf.train.Checkpoint`` write ``serialize()`` for ``variable`` and restore it with
    ``restore(tensors)`` (on that object alone)."""
    set_object_method(variable, "_serialize_to_tensors", serialize)
    set_object_method(variable, "_restore_from_tensors", restore)


def set_deferred_initializer(variable, function):
    # Public stand-in: none; the method Keras calls to create a variable whose creation it
    # deferred (`Variable._deferred_initialize`), replaced on that variable object alone.
    """Make Keras call ``function()`` when it creates the deferred ``variable``."""
    set_object_method(variable, "_deferred_initialize", function)


class WrittenElsewhere:
    # Public stand-in: none. TensorFlow's Trackable protocol: a class that defines
    # `_gather_saveables_for_checkpoint` (here: nothing) ahead of `_serialize_to_tensors` in
    # its MRO writes no value to a `tf.train.Checkpoint` and is no object the restore status
    # expects a value for (`assert_consumed`, `assert_existing_objects_matched`).
    """Mixed in ahead of a variable class: its objects write nothing to checkpoints (their
    value is written under another variable)."""

    def _gather_saveables_for_checkpoint(self):
        return {}


def in_saved_model_save():
    # Public stand-in: none; `tf.saved_model.save` and `tf.train.Checkpoint` serialize
    # variables through the same `_serialize_to_tensors`. SavedModel traces inside its save
    # context, then writes its variables from `save_and_return_nodes` (saved_model/save.py).
    """True while ``tf.saved_model.save`` (or ``model.export``) is tracing or writing."""
    from tensorflow.python.saved_model import save_context
    if save_context.in_save_context():
        return True
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "save_and_return_nodes" and code.co_filename.endswith(
                os.path.join("saved_model", "save.py")):
            return True
        frame = frame.f_back
    return False


def serialize_variable(variable):
    # Public stand-in: none; TensorFlow's Trackable checkpoint protocol (`_serialize_to_tensors`).
    """The tensors ``variable`` writes into a checkpoint (its class's Trackable method)."""
    try:
        return type(variable)._serialize_to_tensors(variable)
    except NotImplementedError:
        # Distributed variables save through legacy SaveableObjects; as Keras's own
        # Variable does, write the value under the standard key.
        return {"VARIABLE_VALUE": variable.read_value()}


def restore_variable(variable, tensors):
    # Public stand-in: none; TensorFlow's Trackable checkpoint protocol (`_restore_from_tensors`).
    """Restore ``variable`` from checkpoint ``tensors`` with its class's Trackable method."""
    try:
        return type(variable)._restore_from_tensors(variable, tensors)
    except NotImplementedError:
        return variable.assign(tensors["VARIABLE_VALUE"])


def optimizer_built_variables(optimizer):
    # Public stand-in: none; the trainable variables an optimizer was built for, which
    # `Optimizer.apply(grads)` without variables uses.
    """The trainable variables ``optimizer`` was built for."""
    return list(optimizer._trainable_variables)


def optimizer_variable_index(optimizer, variable):
    # Public stand-in: none; Keras's own optimizers find a variable's slots in their
    # `update_step` by this index (it resolves a replica's component of a distributed
    # variable, which an identity lookup would miss).
    """The position of ``variable`` in the list ``optimizer`` was built for."""
    return optimizer._get_variable_index(variable)


def optimizer_strategy(optimizer):
    # Public stand-in: none; a Keras optimizer on TensorFlow records the tf.distribute
    # strategy it was created in.
    """The ``tf.distribute`` strategy ``optimizer`` was created in, or None."""
    return getattr(optimizer, "_distribution_strategy", None)


def build_optimizer_base(optimizer, variables):
    # Public stand-in: `keras.optimizers.Optimizer.build`, called past a subclass's own build
    # (LossScaleOptimizer.build builds its inner optimizer for the model's variables, where
    # MasterWeightOptimizer's inner optimizer is built for the masters).
    """Run Keras's base ``Optimizer.build`` for ``optimizer`` (records ``variables``)."""
    keras.optimizers.Optimizer.build(optimizer, variables)


def strategy_supports_no_merge_call():
    # Public stand-in: none; tells whether replica code may skip `merge_call`.
    """Whether the active ``tf.distribute`` strategy runs replica steps without merge_call."""
    tf = _tensorflow()
    return tf.__internal__.distribute.strategy_supports_no_merge_call()


def maybe_merge_call(fn, strategy, *args):
    # Public stand-in: `ReplicaContext.merge_call`, which fails where no merge is needed.
    """Call ``fn(strategy, *args)`` in cross-replica context, merging only when needed."""
    tf = _tensorflow()
    return tf.__internal__.distribute.interim.maybe_merge_call(fn, strategy, *args)


def control_flow_outer_graph():
    # Public stand-in: none; TensorFlow does not say whether code is being traced into the
    # body of a tf.while_loop / tf.cond (a ControlFlowFuncGraph), nor which graph encloses it.
    """The graph enclosing the ``tf.while_loop``/``tf.cond`` bodies being traced, or None."""
    tf = _tensorflow()
    from tensorflow.python.ops import control_flow_v2_func_graphs
    if tf.executing_eagerly():
        return None
    graph = tf.compat.v1.get_default_graph()
    body = control_flow_v2_func_graphs.ControlFlowFuncGraph
    if not isinstance(graph, body):
        return None
    while isinstance(graph, body):
        graph = graph.outer_graph
    return graph


def checkpoint_object_graph(serialized):
    # Public stand-in: none; a TensorFlow checkpoint stores its object graph (which Python
    # attribute path wrote which key) as a TrackableObjectGraph proto with no public parser.
    """``(attribute path, checkpoint key)`` for each attribute in a checkpoint's object graph."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(serialized)
    return [(attr.full_name, attr.checkpoint_key)
            for node in graph.nodes for attr in node.attributes]


def in_xla_compilation():
    # Public stand-in: none; TensorFlow does not say whether the function being traced will
    # be compiled by XLA (`tf.function(jit_compile=True)`, Keras's `jit_compile`).
    """True while tracing code that XLA compiles (a ``jit_compile=True`` function or inside)."""
    tf = _tensorflow()
    from tensorflow.python.ops import control_flow_util
    if tf.executing_eagerly():
        return False
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def is_trackable(obj):
    # Public stand-in: `tf.Module` and `tf.train.Checkpoint` are trackable, but TensorFlow
    # exports no base class that covers every object a checkpoint can track.
    """Whether ``obj`` is an object a ``tf.train.Checkpoint`` can track attributes on."""
    tf = _tensorflow()
    return isinstance(obj, tf.__internal__.tracking.AutoTrackable)


def is_tracked_container(obj):
    # Public stand-in: none; the dict/list wrappers TensorFlow tracks on trackable objects.
    """Whether ``obj`` is a value a ``tf.train.Checkpoint`` tracks (e.g. a wrapped dict)."""
    tf = _tensorflow()
    return isinstance(obj, tf.__internal__.tracking.Trackable)


def own_trainable_variables(layer):
    # Public stand-in: `layer.trainable_weights` also lists the variables of nested layers,
    # which may follow another dtype policy; Keras keeps a layer's own ones in this list.
    """The trainable variables ``layer`` itself created (not those of nested layers)."""
    return list(layer._trainable_variables)


def is_initialized(variable):
    # Public stand-in: none (see uninitialized_variables).
    """Whether Keras has created ``variable``'s value (not deferred)."""
    return getattr(variable, "_value", True) is not None


def set_variable_dtype(variable, dtype, value):
    # Public stand-in: none; a Keras variable's dtype is fixed at construction, and on JAX no
    # creator hook lets tfinit choose it: an fp32 variable a layer built (the exact fp32
    # initializer value, the master) becomes the 16-bit copy Caffe2's PseudoFP16 computes with.
    # On torch the value is a torch.nn.Parameter that layers (their torch_params) and
    # Module.zero_grad hold: its data is swapped in place, as torch's Module.half() does.
    """Give the (non-TensorFlow) Keras ``variable`` the dtype ``dtype`` and value ``value``."""
    variable._dtype = keras.backend.standardize_dtype(dtype)
    if keras.backend.backend() == "torch":
        variable.value.data = keras.ops.convert_to_tensor(value, variable._dtype)
    else:
        variable.assign(value)


def track_optimizer_variable(optimizer, variable):
    # Public stand-in: `add_variable` creates a new variable; tfinit hands an optimizer the
    # masters that exist since the layers were built, so they become its (donated) state.
    """Make the existing ``variable`` one of ``optimizer.variables``."""
    optimizer._track_variable(variable)


def keep_out_of_optimizer_variables(optimizer, variable):
    # Public stand-in: none; keeps an int8 slot (codes and scales' view) out of `variables`.
    optimizer._tracker.stored_ids["variables"].add(id(variable))


def compiled_optimizer(model):
    # Public stand-in: `model.get_compile_config()["optimizer"]`, which is serialized (a new
    # object once deserialized); tfinit needs the very object `compile` was handed (resolved
    # from a string), to tell it from the LossScaleOptimizer Keras's compile wraps it in.
    """The optimizer object ``model.compile`` was last handed (resolved), or None."""
    config = getattr(model, "_compile_config", None)
    return None if config is None else config.config.get("optimizer")


def set_compiled_optimizer(model, optimizer):
    # Public stand-in: none; `compile` records the optimizer it was handed for
    # `get_compile_config` (what a `.keras` file stores and `compile_from_config` rebuilds).
    # An optimizer tfinit puts in after `compile` ran must be recorded there too.
    """Make ``optimizer`` the one ``model.get_compile_config()`` reports."""
    model._compile_config.config["optimizer"] = optimizer


def layers_with_policy_named(name):
    # Public stand-in: none. Keras rebuilds a layer from a saved config with its dtype policy's
    # *name* (Operation.from_config), so a layer rebuilt in a scope on JAX holds a plain
    # DTypePolicy; its name is the string object tfinit's policy gave, found by identity.
    """The Keras layers whose dtype policy's name is the object ``name`` (not an equal one)."""
    referrers = gc.get_referrers(name)  # the policies, or their attribute dicts
    holders = [r for r in referrers if isinstance(r, dict)]
    policies = [o for o in referrers + (gc.get_referrers(*holders) if holders else [])
                if isinstance(o, keras.dtype_policies.DTypePolicy)
                and getattr(o, "_name", None) is name]
    if not policies:
        return []
    referrers = gc.get_referrers(*policies)
    dicts = [r for r in referrers if isinstance(r, dict)]
    candidates = [r for r in referrers if isinstance(r, keras.layers.Layer)]
    if dicts:
        candidates += [o for o in gc.get_referrers(*dicts) if isinstance(o, keras.layers.Layer)]
    found, seen = [], set()
    for layer in candidates:
        policy = getattr(layer, "_dtype_policy", None)
        if id(layer) not in seen and getattr(policy, "_name", None) is name:
            seen.add(id(layer))
            found.append(layer)
    return found


def in_stateless_scope():
    # Public stand-in: none (`keras.StatelessScope` has no public "am I inside one" query);
    # a split pair's scratch master is a value of the step's stateless scope only.
    """Whether a ``keras.StatelessScope`` is active (writes go to it, not to variables)."""
    from keras.src.backend.common.stateless_scope import in_stateless_scope as active

    return active()


def release_value(variable):
    # Public stand-in: none; Keras frees a variable's value only with the variable. A split
    # pair's scratch fp32 master (JAX) must hold no value between steps: it becomes a
    # variable without a value, as Keras's own deferred ones, whose reads give zeros.
    """Drop the (JAX backend) ``variable``'s value (its storage); reads give zeros of its
    shape until the next assign (it is not registered for Keras's deferred initialization)."""
    variable._initializer = keras.initializers.Zeros()
    variable._value = None


def variable_layout(variable):
    # Public stand-in: `keras.distribution.distribution().get_variable_layout(variable)`
    # returns this layout, but only while that distribution is active (a scope's pairs are
    # made when its block exits, which may be outside `with distribution.scope()`).
    """The ``TensorLayout`` (or backend sharding) Keras gave ``variable``, or None."""
    return getattr(variable, "_layout", None)


def set_variable_layout(variable, layout):
    # Public stand-in: `keras.Variable(..., layout=...)` fixes a variable's layout when it is
    # made; tfinit's masters exist before MasterWeightOptimizer(shard_over=...) is built, and
    # their value is laid out again (Keras's own assign distributes it on the new layout).
    """Give the (JAX backend) ``variable`` the layout ``layout`` and redistribute its value."""
    variable._layout = layout
    if getattr(variable, "_value", None) is not None:
        keras.Variable.assign(variable, variable.value)
