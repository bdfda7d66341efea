"""Master/copy pairs on Keras's JAX backend (no ``tf.variable_creator_scope`` there).

A pair is made once, from the layer's own trainable float32 variables, by
:func:`pair_pending`; its kind is decided there from the scope's
:class:`~tfinit._precision.PairSpec` and recorded on the Keras variable as a :class:`JaxPair`
(a ``ParameterInfo``):

- pseudo_fp16: a layer constructed in the scope builds its weights in float32 (its
  ``PairPolicy`` asks for float32 while it builds), so each holds the exact fp32 initializer
  value. That value becomes the master, a separate fp32 ``keras.Variable``
  (``blob_copy["float32"]``, Caffe2's ``P_fp32``), and the layer's variable becomes its
  16-bit cast (Caffe2's ``P = FloatToHalf(P_fp32)``).
- pseudo_fp16 with ``master="split"`` (:class:`SplitJaxPair`): the layer's variable becomes
  the bfloat16 copy and the other is the int16 remainder (``blob_copy["int16"]``); the fp32
  master exists only during an optimizer step, in a scratch variable without a value between
  steps (:mod:`tfinit.mixed_precision._jax_split`).
- reverse: the layer's variable stays the fp32 master (as under Keras ``mixed_*``); the
  16-bit copy is a separate ``keras.Variable`` (``blob_copy[compute_dtype]``), always
  ``cast(master)``, which is what the layer computes with (Keras's per-read cast gives the
  same bits).

The other variable is not tracked by the layer (files and ``model.weights`` see the layer's
variables only); ``MasterWeightOptimizer`` makes it part of its own state, so ``fit``'s
compiled step updates it and Keras writes it back when it syncs the state.
"""

import keras
import numpy as np
from keras import ops

from tfinit import _keras_internals as internals
from tfinit._precision import MASTER_DTYPE
from tfinit.mixed_precision import _jax_split, _policy, _weight_files
from tfinit.parameter_info import ParameterInfo

# The attribute tfinit sets on the Keras variables it pairs (its own name, on its own objects).
_INFO_ATTRIBUTE = "_tfinit_info"


class JaxPair(ParameterInfo):
    """One pair's ``ParameterInfo`` on a non-TensorFlow backend.

    Args:
        param: the Keras variable the layer holds.
        other: the pair's other Keras variable (the master, or the 16-bit copy in reverse).
        spec: the pair's :class:`~tfinit._precision.PairSpec`.
    """

    def __init__(self, param, other, spec):
        super().__init__(param, tuple(param.shape), blob_copy={other.dtype: other},
                         name=param.name)
        self.spec = spec
        self.other = other

    @property
    def computes_with_copy(self):
        """Whether the layer holds the 16-bit copy (pseudo_fp16)."""
        return self.spec.is_pseudo

    @property
    def master(self):
        """The fp32 ``keras.Variable``."""
        return self.other if self.spec.is_pseudo else self.param

    @property
    def copy(self):
        """The 16-bit ``keras.Variable``, ``cast(master)``."""
        return self.param if self.spec.is_pseudo else self.other

    def master_tensor(self):
        """The exact fp32 master (a backend tensor)."""
        return self.master.value

    def master_value(self):
        """The exact fp32 master (numpy)."""
        return np.asarray(ops.convert_to_numpy(self.master_tensor()), np.float32)

    def stored(self):
        """The variables that hold this pair between steps."""
        return [self.param, self.other]

    def open_step(self):
        """Before the inner optimizer updates ``master``: nothing to do (it is stored)."""

    def close_step(self):
        """After the inner optimizer updated ``master``: copy <- cast(master)."""
        self.refresh()

    def assign_master(self, value):
        """Set the master to ``value`` (cast to float32) exactly and re-make the copy."""
        master = ops.cast(value, MASTER_DTYPE)
        raw_assign(self.master, master)
        raw_assign(self.copy, ops.cast(master, self.copy.dtype))

    def refresh(self):
        """copy <- cast(master)."""
        raw_assign(self.copy, ops.cast(self.master.value, self.copy.dtype))

    def check_copy_matches_master(self):
        """Refuse a pair whose 16-bit copy was changed without its master.

        Raises:
            ValueError: ``copy != cast(master)`` (a plain optimizer or an assign changed the
                copy); using the master would silently drop that change.
        """
        cast = self.master_value().astype(_numpy_dtype(self.copy.dtype))
        if cast.tobytes() != np.asarray(ops.convert_to_numpy(self.copy.value)).tobytes():
            raise ValueError(
                f"Variable {self.param.path!r}: its 16-bit value was changed without its fp32 "
                "master (a plain Keras optimizer or an assign updates only the 16-bit "
                "variable), so using the master would drop those updates. Train paired "
                "models with tfinit.mixed_precision.MasterWeightOptimizer, or call "
                "tfinit.mixed_precision.set_master_weights after changing weights by hand."
            )


class SplitJaxPair(JaxPair):
    """A pseudo_fp16 pair whose fp32 master is stored split (``master="split"``): ``param`` is
    the bfloat16 variable, ``other`` the int16 remainder (``blob_copy["int16"]``).

    No fp32 value is kept between steps: ``master`` is a scratch fp32 ``keras.Variable``
    without a value, for the inner optimizer to build its state on and update. A step joins
    the master into it (in ``fit``'s compiled step, a value of the step's stateless scope
    only), and splits the updated master back into (copy, remainder).
    """

    def __init__(self, param, remainder, spec, scratch):
        super().__init__(param, remainder, spec)
        self.scratch = scratch

    @property
    def master(self):
        """The scratch fp32 ``keras.Variable`` the inner optimizer updates (no value between
        steps: read the master with :meth:`master_tensor`)."""
        return self.scratch

    @property
    def remainder(self):
        """The int16 ``keras.Variable``."""
        return self.other

    def master_tensor(self):
        return _jax_split.join(self.param.value, self.other.value)

    def assign_master(self, value):
        """Split ``value`` (cast to float32) into the copy and the remainder (exact but for a
        tie above an even copy: 1 ulp toward it)."""
        copy, remainder = _jax_split.split(ops.cast(value, MASTER_DTYPE))
        raw_assign(self.param, copy)
        raw_assign(self.other, remainder)

    def refresh(self):
        """Nothing: the copy is the master's top half."""

    def check_copy_matches_master(self):
        """Nothing to check: the copy is the master's top half."""

    def open_step(self):
        raw_assign(self.scratch, self.master_tensor())

    def close_step(self):
        self.assign_master(self.scratch.value)
        if not internals.in_stateless_scope():  # else: a value of that scope only
            internals.release_value(self.scratch)


def raw_assign(variable, value):
    """Keras's own assign (the paired variable's assign sets its master)."""
    keras.Variable.assign(variable, value)


class PairedVariable(keras.Variable):
    """The class of a paired Keras variable: every write reaches the master.

    ``assign`` (``set_weights``, a weights file's load, user code, an optimizer updating a
    reverse master) sets the fp32 master to the value exactly and re-casts the copy, so
    ``set_weights(get_weights())`` is lossless and no write leaves a stale copy;
    ``assign_add`` / ``assign_sub`` add to the master. Reads are Keras's own.
    """

    def assign(self, value):
        pair_of(self).assign_master(value)
        return value

    def assign_add(self, value):
        pair = pair_of(self)
        pair.assign_master(ops.add(pair.master_tensor(), ops.cast(value, MASTER_DTYPE)))
        return value

    def assign_sub(self, value):
        pair = pair_of(self)
        pair.assign_master(ops.subtract(pair.master_tensor(), ops.cast(value, MASTER_DTYPE)))
        return value


def _numpy_dtype(dtype):
    if keras.backend.standardize_dtype(dtype) == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(keras.backend.standardize_dtype(dtype))


def pair_pending():
    """Pair the float32 trainable weights of every layer built in a scope and not paired yet
    (a layer whose weights Keras has not created yet waits for a later call)."""
    for policy in _policy.policies_to_pair():
        waiting = False
        for layer in _policy.layers_to_pair(policy):
            if _policy.use_normalization_policy(layer, policy):
                continue
            variables = internals.own_trainable_variables(layer)
            if not layer.built or not all(internals.is_initialized(v) for v in variables):
                waiting = True
                continue
            for variable in variables:
                if (pair_of(variable) is None and variable.dtype == MASTER_DTYPE
                        and internals.autocasts(variable)):
                    _make_pair(variable, policy.spec)
                    if policy.spec.is_pseudo:
                        install_layer_hooks(layer)
        if not waiting:
            _policy.done_pairing(policy)


def _make_pair(variable, spec):
    """The one place a pair is made (and its kind decided): pseudo_fp16 (fp32 or split
    master) or reverse."""
    # a copy: on torch a keras.Variable made from another's value (a torch.nn.Parameter)
    # would share it, and the master would change dtype with the copy
    master_value = ops.copy(variable.value)
    name = variable.name + spec.other_suffix
    if spec.is_split:
        copy, remainder = _jax_split.split(master_value)
        other = keras.Variable(remainder, dtype="int16", trainable=False, name=name)
        scratch = keras.Variable(ops.zeros(variable.shape, MASTER_DTYPE), dtype=MASTER_DTYPE,
                                 trainable=False, name=variable.name + "_fp32_scratch")
        internals.release_value(scratch)
        internals.set_variable_dtype(variable, spec.compute_dtype, copy)
        pair = SplitJaxPair(variable, other, spec, scratch)
    else:
        if spec.is_pseudo:
            other = keras.Variable(master_value, dtype=MASTER_DTYPE, trainable=False, name=name)
            internals.set_variable_dtype(variable, spec.compute_dtype,
                                         ops.cast(master_value, spec.compute_dtype))
        else:
            other = keras.Variable(ops.cast(master_value, spec.compute_dtype),
                                   dtype=spec.compute_dtype, trainable=False, name=name)
        pair = JaxPair(variable, other, spec)
    setattr(variable, _INFO_ATTRIBUTE, pair)
    internals.make_instance_of(variable, PairedVariable)
    return pair


def pair_of(variable):
    """The :class:`JaxPair` of a paired Keras variable, or None."""
    return getattr(variable, _INFO_ATTRIBUTE, None)


def lookup(variable):
    """The ParameterInfo of a paired variable, or None."""
    pair_pending()
    return pair_of(variable)


def variables_of(target, who):
    """The variables of a Keras model/layer, one variable or an iterable of them."""
    pair_pending()
    if isinstance(target, keras.Variable):
        return [target]
    if isinstance(target, keras.layers.Layer):
        return list(target.weights)
    try:
        return list(target)
    except TypeError:
        raise TypeError(
            f"{who} expects a Keras model/layer, a variable or an iterable of variables. "
            f"Received: {type(target).__name__}"
        ) from None


def pairs_of(variables):
    """The distinct pairs among ``variables``, in order."""
    pairs, seen = [], set()
    for variable in variables:
        pair = pair_of(variable)
        if pair is not None and id(pair) not in seen:
            seen.add(id(pair))
            pairs.append(pair)
    return pairs


def parameter_info(variable):
    """The ``ParameterInfo`` of a variable created in ``tfinit.mixed_precision.scope``.

    ``param`` is the variable the layer holds; ``blob_copy`` maps the other dtype's name
    (``"float32"`` in pseudo_fp16, the 16-bit dtype in reverse) to the other variable.

    Args:
        variable: a Keras variable.

    Returns:
        The ``ParameterInfo`` of its pair.

    Raises:
        ValueError: the variable has no master/copy pair.

    Example:

    >>> import keras
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     dense = keras.layers.Dense(2, kernel_initializer="ones")
    ...     dense.build((None, 3))
    >>> info = mp.parameter_info(dense.kernel)
    >>> info.param is dense.kernel, dense.kernel.dtype, info.blob_copy["float32"].dtype
    (True, 'float16', 'float32')
    """
    pair = lookup(variable)
    if pair is None:
        label = getattr(variable, "path", None) or getattr(variable, "name", repr(variable))
        raise ValueError(
            f"Variable {label!r} has no fp32 master/16-bit copy pair: it was not created "
            "inside tfinit.mixed_precision.scope(...) (or it is not a trainable floating "
            "variable). Build the layer/model inside the scope."
        )
    return pair


def sync_copies(model_or_variables):
    """Refresh every 16-bit copy from its fp32 master (``copy = cast(master)``).

    Args:
        model_or_variables: a Keras layer/model, one variable or an iterable of them.

    Returns:
        The number of distinct pairs among them.

    Raises:
        TypeError: ``model_or_variables`` is none of these.

    Example:

    >>> import keras
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> master = mp.parameter_info(model.layers[0].kernel).blob_copy["float32"]
    >>> _ = master.assign([[0.5], [2.0]])
    >>> mp.sync_copies(model)                           # kernel and bias
    2
    >>> keras.ops.convert_to_numpy(model.layers[0].kernel).ravel()
    array([0.5, 2. ], dtype=float16)
    """
    pairs = pairs_of(variables_of(model_or_variables, "sync_copies"))
    for pair in pairs:
        pair.refresh()
    return len(pairs)


# ------------------------------------------------------------------ Keras weight files


def master_for_file(value):
    """What a weights file stores for ``value``: a pseudo_fp16 pair's fp32 master (numpy),
    else ``value`` (a reverse pair's variable is its master).

    Raises:
        ValueError: the pair's 16-bit copy was changed without its master.
    """
    pair = pair_of(value) if isinstance(value, keras.Variable) else None
    if pair is not None and pair.spec.is_pseudo:
        pair.check_copy_matches_master()
        return pair.master_value()
    return value


def install_layer_hooks(layer):
    """``.weights.h5`` / ``.keras`` files store ``layer``'s pseudo_fp16 masters (fp32), in the
    layout TensorFlow's tfinit writes; loading assigns them, which sets the masters."""
    if internals.has_object_method(layer, "save_own_variables"):
        return
    save = layer.save_own_variables

    def save_own_variables(store):
        return save(_weight_files.StoreView(store, write=master_for_file))

    internals.set_object_method(layer, "save_own_variables", save_own_variables)
