"""Which variables pair up, and the three kinds of master/copy pair, decided once per pair:
the backend-neutral rule and record.

The rule (:func:`pairs_up`) is asked on every backend: on TensorFlow as a variable is
created, on the ``keras.Variable`` backends of a built layer's weights.

A paired variable carries one record, a Caffe2 ``ParameterInfo`` (``param``, ``blob_copy``)
that also knows its pair's kind. The kind is chosen once, when the pair is made, by
:func:`pair_class` from the scope's :class:`~tfinit._precision.PairSpec`; from then on code
asks the record (``pair.master``, ``pair.copy``, ``pair.computes_with_copy``,
``pair.file_value()``), never the mode again. The kinds, as Caffe2 names them:

- pseudo_fp16 (Caffe2's ``PseudoFP16Initializer``): ``param`` is the 16-bit copy the layer
  computes with; the other variable is the fp32 master (``blob_copy["float32"]``).
- reverse (``ReversePseudoFP16Initializer``): ``param`` is the fp32 master; the other
  variable is the 16-bit copy (``blob_copy[compute_dtype]``).
- split (pseudo_fp16, ``master="split"``): ``param`` is the bfloat16 copy, the master's top
  half; the other variable is the int16 remainder (``blob_copy["int16"]``). No fp32 variable
  holds the master between steps (``tfinit._split_master``).

This module holds the roles each kind gives its two variables and what the pair's users read
on every backend. Each backend folder's ``pair_records`` adds how a master is read and
written: ``tensorflow`` (``tf.Variable``, ``tf.distribute``) and ``keras_variables`` (JAX and
torch). It imports neither TensorFlow nor JAX.
"""

import weakref

import keras

from tfinit import _keras_internals as internals
from tfinit._precision import MASTER_DTYPE

from tfinit.parameter_info import ParameterInfo

#: The attribute tfinit sets on the variables it pairs (its own name, on its own objects).
INFO_ATTRIBUTE = "_tfinit_info"


class PairRecord(ParameterInfo):
    """A pair's ``ParameterInfo``: its ``spec`` and the roles of its two variables.

    Subclasses are one kind (:class:`PseudoFP16Roles`, :class:`ReverseRoles`,
    :class:`SplitRoles`) and one backend; ``held`` is the variable the layer holds and
    ``other`` the pair's other one, each as the backend's variable.
    """

    #: whether the layer computes with the 16-bit copy (so files, penalties, constraints and
    #: optimizers use the master, not the variable the layer holds)
    computes_with_copy = True
    #: whether the master is stored split (bfloat16 copy + int16 remainder)
    stores_master_split = False
    #: whether there is no master: the optimizer's fp32 update is rounded stochastically
    #: into the bfloat16 weight (``master="stochastic"``)
    rounds_stochastically = False
    #: the layer of a pseudo_fp16 pair that does not autocast (Keras's Embedding family), as a
    #: weak reference, or None; set where the pair is made (``reads_wide``)
    uncast_layer = None

    def reads_wide(self):
        """Whether a layer call now reads the copy widened to float32 (its gradient summed in
        float32): Keras ``mixed_*`` reads the fp32 variable of a layer that does not autocast
        uncast when an enclosing layer's call opened an autocast scope (the layer clears it),
        and cast when the layer is called first (it opens one); what the layer computes from
        the uncast read (a tied embedding's logits) is float32."""
        layer = self.uncast_layer() if self.uncast_layer is not None else None
        return layer is not None and internals.called_inside_another_layer(layer)

    def note_layer(self, layer):
        """Record ``layer``, the layer holding the pair's variable (``uncast_layer``)."""
        if self.computes_with_copy and layer is not None and not layer.autocast:
            self.uncast_layer = weakref.ref(layer)

    @property
    def held(self):
        """The variable the layer holds (``param``) as the backend's variable."""
        return self.param

    @property
    def master(self):
        """The fp32 variable of the master."""
        raise NotImplementedError

    @property
    def copy(self):
        """The 16-bit variable the layer computes with, ``cast(master)``."""
        raise NotImplementedError

    def stored(self):
        """``(role, variable)`` for each variable that holds the pair between steps."""
        return [("master", self.master), ("copy", self.copy)]

    def file_value(self):
        """What a Keras weights file stores for the pair's variable: the exact fp32 master
        (numpy), or ``None`` where the variable is the master (stored as it is)."""
        raise NotImplementedError


class PseudoFP16Roles(PairRecord):
    """The layer holds the 16-bit copy; the fp32 master is the other variable."""

    @property
    def master(self):
        return self.other

    @property
    def copy(self):
        return self.held


class ReverseRoles(PairRecord):
    """The layer holds the fp32 master; the 16-bit copy is the other variable."""

    computes_with_copy = False

    @property
    def master(self):
        return self.held

    @property
    def copy(self):
        return self.other

    def file_value(self):
        return None  # the variable is the master: files store it as it is


class SplitRoles(PairRecord):
    """The layer holds the bfloat16 copy (the master's top half); the other variable is the
    int16 remainder. The backend says what ``master`` is during a step."""

    stores_master_split = True

    @property
    def copy(self):
        return self.held

    @property
    def remainder(self):
        """The int16 remainder."""
        return self.other

    def stored(self):
        return [("copy", self.copy), ("remainder", self.remainder)]


class PairedVariableRules(keras.Variable):
    """What a paired Keras variable answers unlike Keras's own, on every backend.

    - ``regularizer``: where the layer computes with the copy, the penalty is computed on the
      fp32 master (as Keras's mixed policies compute it on their fp32 variable), through the
      backend's :meth:`penalty_on_master`;
    - ``overwrite_with_gradient``: read by every Keras optimizer at build and at each apply;
      a pair a plain optimizer would update without its master refuses it
      (``MasterWeightOptimizer`` gives its inner optimizer the master instead). Keras's
      float8 scales, which optimizers overwrite, answer True as Keras's do.

    A backend's ``PairedVariable`` mixes it in and says how it finds its pair (``pair``) and
    computes a penalty on the master (``penalty_on_master``).
    """

    def pair(self):
        """The variable's pair record."""
        raise NotImplementedError

    def penalty_on_master(self, penalty):
        """``penalty`` (a Keras regularizer) computed on the variable's fp32 master."""
        raise NotImplementedError

    def refuses_plain_optimizer(self, pair):
        """Whether a plain optimizer updating the variable would miss the master."""
        return pair.computes_with_copy

    @property
    def regularizer(self):
        penalty = keras.Variable.regularizer.fget(self)
        pair = self.pair()
        if penalty is None or pair is None or not pair.computes_with_copy:
            return penalty
        return self.penalty_on_master(penalty)

    @regularizer.setter
    def regularizer(self, value):
        keras.Variable.regularizer.fset(self, value)

    @property
    def overwrite_with_gradient(self):
        if keras.Variable.overwrite_with_gradient.fget(self):
            return True  # Keras's float8 scales: overwritten, never paired-updated
        pair = self.pair()
        if pair is not None and self.refuses_plain_optimizer(pair):
            raise ValueError(
                f"Variable {variable_label(self)!r} has an fp32 master (it was built in "
                "tfinit.mixed_precision.scope), and a plain Keras optimizer would update it "
                "without that master. Wrap the optimizer: `model.compile(optimizer=tfinit."
                "mixed_precision.MasterWeightOptimizer(keras.optimizers.Adam(...)))` (compile "
                "on a model constructed in the scope does it when the `with` block ends: "
                "call fit after the block, or hand compile the wrapped optimizer to fit "
                "inside it), or in a custom loop "
                "`optimizer = tfinit.mixed_precision.MasterWeightOptimizer(optimizer)`.")
        return False

    @overwrite_with_gradient.setter
    def overwrite_with_gradient(self, value):
        keras.Variable.overwrite_with_gradient.fset(self, value)


class StochasticRoles(PairRecord):
    """``master="stochastic"``: the layer holds the bfloat16 weight and there is no master;
    the other variable is an empty int16 placeholder (no element: the pair's record, files
    and optimizer state are the split pair's, with nothing stored beside the weight). The
    master a reader or the inner optimizer sees is the weight widened to float32; the
    optimizer writes its fp32 update back with stochastic rounding
    (``tfinit._stochastic_rounding``). The backend says what ``master`` is during a step."""

    rounds_stochastically = True
    stores_master_split = False
    #: the stream of its draws: the index of its variable in the list the optimizer was
    #: built for (``MasterWeightOptimizer.build`` sets it)
    stream = 0

    @property
    def copy(self):
        return self.held

    def stored(self):
        return [("copy", self.copy)]


def pair_class(spec, *, pseudo_fp16, reverse, split, stochastic=None):
    """The one place a pair's kind is decided: the backend's class for ``spec``'s kind.

    Args:
        spec: the scope's :class:`~tfinit._precision.PairSpec`.
        pseudo_fp16, reverse, split, stochastic: the backend's record class of each kind.

    Returns:
        The class whose instances are the records of pairs made under ``spec``.
    """
    if spec.is_stochastic:
        return stochastic
    if spec.is_split:
        return split
    return pseudo_fp16 if spec.is_pseudo else reverse


def record_of(variable):
    """The record on ``variable`` (any object), or None."""
    return getattr(variable, INFO_ATTRIBUTE, None)


def variable_label(variable):
    """How error messages name a variable: its Keras path, else its name."""
    return getattr(variable, "path", None) or getattr(variable, "name", None) or repr(variable)


def _is_variable(target):
    # a keras.Variable, or a backend variable (tf.Variable): iterable only row by row
    return isinstance(target, keras.Variable) or (
        hasattr(target, "assign") and hasattr(target, "dtype") and hasattr(target, "shape"))


def variables_of(target, who):
    """The variables of a Keras model/layer, a ``tf.Module``, one variable or an iterable.

    Raises:
        TypeError: ``target`` is none of these (the message names ``who``).
    """
    if _is_variable(target):
        return [target]
    if isinstance(target, keras.layers.Layer):
        return list(target.weights)
    if hasattr(target, "variables") and not callable(target.variables):  # a tf.Module
        return list(target.variables)
    try:
        return list(target)
    except TypeError:
        raise TypeError(
            f"{who}: Argument `model_or_variables` must be a Keras model/layer, a tf.Module, "
            f"a variable or an iterable of variables. Received: {type(target).__name__}"
        ) from None


def pairs_of(variables, pair_of):
    """The distinct pairs among ``variables`` (``pair_of``: the backend's lookup), in order."""
    pairs, seen = [], set()
    for variable in variables:
        pair = pair_of(variable)
        if pair is not None and id(pair) not in seen:
            seen.add(id(pair))
            pairs.append(pair)
    return pairs


def pairs_up(spec, dtype, variable=None, *, added_to_built_layer=False):
    """Whether a trainable floating variable gets an fp32 master under ``spec`` (the one
    rule, every backend):

    - a Keras variable Keras keeps in float32, uncast (``autocast=False``: float8 scales and
      amax histories): no;
    - a float32 weight added to a built layer (LoRA's, float32 on purpose against under- and
      overflow while fine-tuning): no, it stays as Keras made it;
    - reverse: float32 variables;
    - pseudo_fp16: variables asked for in the compute dtype (the scope's policy asks so for
      its layers' weights) and raw ``tf.Variable``s in float32; a Keras variable asked for in
      float32 (a layer given ``dtype="float32"``) stays as it is.

    Args:
        spec: the scope's :class:`~tfinit._precision.PairSpec`.
        dtype: the name of the dtype the variable was asked for.
        variable: the Keras variable, or None (a raw ``tf.Variable``).
        added_to_built_layer: whether a layer already built added it.
    """
    if variable is not None and dtype == MASTER_DTYPE and not internals.autocasts(variable):
        return False
    if added_to_built_layer and dtype == MASTER_DTYPE:
        return False
    if not spec.is_pseudo:
        return dtype == MASTER_DTYPE
    if dtype == spec.compute_dtype:
        return True
    return variable is None and dtype == MASTER_DTYPE
