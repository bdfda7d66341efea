"""Caffe2's initializer family (``caffe2/python/modeling/initializers.py``) on TF variables.

Same contract as Caffe2: ``Initializer(operator_name=None, **kwargs)`` names a fill
operator and its arguments, ``update`` sets them once, ``create_param(param_name=,
shape=, init_net=)`` creates the parameter and returns its ``ParameterInfo``. Where Caffe2
added an operator to ``init_net`` writing blob ``P``, tfinit creates the ``tf.Variable``
``P`` at once (prefixed by any enclosing ``tf.name_scope``, as Caffe2's name scope
prefixes blob names).

``init_net`` (optional) is where the created variables are tracked so that checkpoints
save them (``tfinit._init_net``): a ``tf.Module`` gets them in its dict attribute
``tfinit_params``, a ``dict`` as items. Every variable of a parameter is tracked: ``P`` and
its ``P_fp32``/``P_fp16``/``P_bf16``.

Without a seed in the operator's arguments, every ``create_param`` draws new values, as
each Caffe2 fill operator without a seed did; with a seed, values repeat. Used as a Keras
initializer (``__call__(shape, dtype)``), an ``Initializer`` follows Keras's seed rules.
"""

import inspect
from collections.abc import Mapping

import keras
import numpy as np

from tfinit import _backend, _fans, _init_net
from tfinit._split_master import tensorflow as tf_split
from tfinit._init_net import TRACKING_ATTRIBUTE, track  # noqa: F401 (public here)
from tfinit._precision import (MASTER_DTYPE, REMAINDER_DTYPE, Mode, PairSpec,
                               check_initializer_scope, dtype_name, pair_spec,
                               parse_compute_dtype)
from tfinit.fills import RandomFill, distributed, registry
from tfinit.parameter_info import ParameterInfo, check_tags
from tfinit.sources import open_source

#: what needs TensorFlow here, named in the error on another backend
_FEATURE = "creating TensorFlow variables (create_param)"


def _tf_variable(initial_value, name, dtype, trainable):
    tf = _backend.tensorflow(_FEATURE)
    return tf.Variable(initial_value=initial_value, name=name, dtype=dtype, trainable=trainable)


# ---------------------------------------------------------------- master/copy pairs


def create_master_copy_pair(name, value, mode="pseudo_fp16", compute_dtype="float16",
                            trainable=True, make_variable=None):
    """Create parameter ``name`` as an fp32 master and a 16-bit copy; its ``ParameterInfo``.

    ``value`` (array, tensor or zero-argument callable) is made float32 and becomes the
    master; the copy is ``cast(master, compute_dtype)``, rounded to nearest even as Caffe2's
    FloatToHalf, so ``copy == cast(master)`` exactly. A value the copy cannot hold (beyond
    float16's range) is a ``ValueError``, not a silent inf (checked when running eagerly).

    - ``mode="pseudo_fp16"`` (PseudoFP16Initializer): primary ``name`` is the 16-bit copy,
      ``blob_copy = {tf.float32: <name>_fp32}``.
    - ``mode="reverse"`` (ReversePseudoFP16Initializer): primary ``name`` is the fp32
      master, ``blob_copy = {tf.float16: <name>_fp16}`` (bfloat16: ``<name>_bf16``).

    The primary gets ``trainable``; the other variable is not trainable (optimizers reach it
    through ``blob_copy``, as Caffe2's MultiPrecisionSgd did). ``make_variable(initial_value=,
    name=, dtype=, trainable=)`` creates each variable (default ``tf.Variable``), e.g. a
    variable creator's ``next_creator``. The master is created first, as in Caffe2.
    """
    spec = pair_spec(mode, compute_dtype, "create_master_copy_pair")
    return create_pair(name, value, spec, trainable=trainable, make_variable=make_variable)


def create_pair(name, value, spec, *, trainable=True, make_variable=None):
    """:func:`create_master_copy_pair` for an already parsed :class:`PairSpec`."""
    who = "create_master_copy_pair"
    tf = _backend.tensorflow(_FEATURE)
    make_variable = make_variable or _tf_variable
    if callable(value):
        value = value()
    value = tf.convert_to_tensor(value)
    if not value.dtype.is_floating:
        raise ValueError(
            f"{who}: parameter {name!r} has {value.dtype.name} values; only floating "
            f"parameters get an fp32 master and a 16-bit copy."
        )
    master_value = tf.cast(value, tf.float32)
    copy_value = tf.cast(master_value, spec.compute_dtype)
    if tf.executing_eagerly():
        lost = tf.math.is_finite(master_value) & ~tf.math.is_finite(copy_value)
        if bool(tf.reduce_any(lost)):
            first = master_value.numpy()[lost.numpy()].reshape(-1)[0]
            raise ValueError(
                f"{who}: parameter {name!r} holds {first!r}, beyond {spec.compute_dtype}'s "
                f"range; its {spec.compute_dtype} copy would be inf."
            )
    if spec.is_stochastic:
        # No master: the bfloat16 weight, and an empty placeholder as the pair's other one.
        remainder = tf.zeros([0], tf.int16)
    elif spec.is_split:
        # No fp32 variable: the bfloat16 copy and an int16 remainder hold the master exactly.
        copy_value, remainder = tf_split.split(master_value)
    else:
        remainder = None
    # Which variable the code sees and which rides along is the spec's (its two dtypes).
    values = {MASTER_DTYPE: master_value, spec.compute_dtype: copy_value,
              REMAINDER_DTYPE: remainder}
    primary_kwargs = dict(initial_value=values[spec.primary_dtype], name=name,
                          dtype=spec.primary_dtype, trainable=trainable)
    other_kwargs = dict(initial_value=values[spec.other_dtype], name=name + spec.other_suffix,
                        dtype=spec.other_dtype, trainable=False)
    if spec.is_pseudo:  # the master's storage first, as Caffe2's initializers create them
        other = make_variable(**other_kwargs)
        primary = make_variable(**primary_kwargs)
    else:
        primary = make_variable(**primary_kwargs)
        other = make_variable(**other_kwargs)
    return ParameterInfo(primary, master_value.shape,
                         blob_copy={tf.as_dtype(spec.other_dtype): other})


# ---------------------------------------------------------------- initializers


def build_fill(operator_name, kwargs):
    """The fill for ``operator_name`` and its Caffe2 kwargs, through ``registry.build``.

    ``layout`` is accepted for every operator (checked, then dropped for the fills whose
    values do not depend on it), so one kwargs dict can serve weights and biases.
    """
    if not isinstance(kwargs, Mapping):
        raise TypeError(
            f"{operator_name}: Argument `kwargs` (the operator's arguments) must be a dict. "
            f"Received: kwargs of type {type(kwargs).__name__}."
        )
    kwargs = dict(kwargs)
    cls = registry.lookup(operator_name)
    if "layout" in kwargs and "layout" not in inspect.signature(cls.__init__).parameters:
        _fans.check_layout(kwargs.pop("layout"), operator_name)
    return registry.build(operator_name, kwargs)


@keras.saving.register_keras_serializable(package="tfinit")
class Initializer(keras.initializers.Initializer):
    """Creates a parameter filled by a Caffe2 fill operator (Caffe2's ``Initializer``).

    Same contract as Caffe2's ``modeling/initializers.py``: the operator is named once (at
    construction or by ``update``), and ``create_param(param_name=, shape=, init_net=)``
    creates the parameter and returns its :class:`ParameterInfo`. Where Caffe2 added a fill
    op to ``init_net``, tfinit creates the ``tf.Variable`` at once (TensorFlow backend).
    Without a ``seed`` each ``create_param`` draws new values, as an unseeded Caffe2 op did.
    Also a Keras initializer: ``Dense(4, kernel_initializer=Initializer("XavierFill"))``.

    Args:
        operator_name: a Caffe2 fill operator name (``tfinit.fill_ops()``), or ``None`` to
            set it later with ``update``.
        **kwargs: the operator's Caffe2 arguments; ``layout="caffe2"`` for code that
            passes Caffe2-layout shapes (``[out, in]``, OIHW).

    Raises:
        ValueError: an unknown operator name (close matches named) or a bad argument value.
        TypeError: an argument the operator does not take.

    Example:

    >>> import tfinit
    >>> init = tfinit.Initializer("GaussianFill", std=0.01, seed=1, rng="caffe2")
    >>> info = init.create_param(param_name="fc_w", shape=[4, 3])
    >>> info.name, info.shape, info.param.dtype.name
    ('fc_w', (4, 3), 'float32')
    >>> init.update("XavierFill", {})
    Traceback (most recent call last):
    ...
    ValueError: Initializer already uses operator 'GaussianFill'; operator name overwrites ...
    """

    def __init__(self, operator_name=None, **kwargs):
        self.operator_name = None
        self.operator_kwargs = kwargs
        self.fill = None
        if operator_name is not None:
            self._set_operator(operator_name, kwargs)

    def update(self, operator_name, kwargs):
        """Set the operator once; a second operator is an error, as in Caffe2."""
        if self.operator_name is not None:
            raise ValueError(
                f"{type(self).__name__} already uses operator {self.operator_name!r}; "
                f"operator name overwrites are not allowed (asked for {operator_name!r})."
            )
        self._set_operator(operator_name, {} if kwargs is None else kwargs)

    def _set_operator(self, operator_name, kwargs):
        fill = build_fill(operator_name, kwargs)
        self._check_fill(fill)
        self.operator_name, self.operator_kwargs, self.fill = operator_name, dict(kwargs), fill

    def _check_fill(self, fill):
        """Hook: refuse fills this initializer cannot use."""

    def _require_fill(self):
        if self.fill is None:
            raise ValueError(
                f"{type(self).__name__} has no fill operator yet; give one at construction, "
                f"through update(operator_name, kwargs) or update_initializer(...)."
            )
        return self.fill

    def _fill_for_param(self, layout="caffe2"):
        """The fill ``create_param`` runs, reading shapes in ``layout``."""
        fill = self._require_fill()
        fresh = isinstance(fill, RandomFill) and self.operator_kwargs.get("seed") is None
        relayout = getattr(fill, "layout", layout) != layout
        if fresh or relayout:
            # A fresh unseeded operator per parameter, as Caffe2: new values every time;
            # or the same operator reading the shape in the asked layout.
            kwargs = dict(self.operator_kwargs)
            if hasattr(fill, "layout"):
                kwargs["layout"] = layout
            fill = build_fill(self.operator_name, kwargs)
        return fill

    def _param_layout(self, layout):
        """``create_param``'s layout: the argument, else the operator's, else Caffe2's."""
        if layout is None:
            layout = self.operator_kwargs.get("layout", "caffe2")
        return _fans.check_layout(layout, f"{type(self).__name__}.create_param")

    def create_param(self, param_name, shape, init_net=None, *, dtype=None, trainable=True,
                     layout=None, tags=None):
        """Create variable ``param_name`` of exactly ``shape``; its ``ParameterInfo``.

        Caffe2's API, so ``shape`` is read as Caffe2's: an FC weight ``[out, in]``, a conv
        weight OIHW, and XavierFill/MSRAFill/DiagonalFill use Caffe2's fans for it
        (``layout="caffe2"``). Used as a Keras ``kernel_initializer`` (``__call__``), the
        same initializer reads Keras's layout (``[in, out]``, HWIO) unless its operator
        arguments say ``layout=``.

        Args:
            param_name: the variable's name (inside any ``tf.name_scope``).
            shape: the parameter's shape, fully known non-negative integers.
            init_net: where to track the variables for checkpoints: ``None``, a
                ``tf.Module`` (or another trackable) or a dict.
            dtype: the variable's dtype (default: the fill's own, then Keras's floatx).
            trainable: whether the variable is trainable.
            layout: ``"caffe2"`` or ``"keras"``: how ``shape`` is read; default: the
                operator's ``layout`` argument if given, else ``"caffe2"``.
            tags: Caffe2's ``ParameterTags`` for the parameter (``"WEIGHT"``, ``"BIAS"``,
                ``"COMPUTED_PARAM"``, a list of them, or ``None``), kept on the
                ``ParameterInfo`` as ``tags``.

        Returns:
            The :class:`ParameterInfo` of the created variable.

        Raises:
            TypeError: a bad ``param_name``/``shape``/``init_net``.
            ValueError: no operator yet, a name ``init_net`` already holds, a bad
                ``layout`` or an unknown tag.
            RuntimeError: the Keras backend is not TensorFlow.

        Example:

        >>> import tfinit
        >>> info = tfinit.Initializer("XavierFill", seed=3).create_param("fc_w", [10, 20],
        ...                                                            tags="WEIGHT")
        >>> bound = (3 / 20) ** 0.5          # Caffe2: fan_in = 200 // 10 (shape [out, in])
        >>> bool(abs(info.param.numpy()).max() <= bound), info.tags
        (True, ('WEIGHT',))
        """
        who = type(self).__name__
        param_name = _init_net.check_param_name(param_name, who)
        shape = _init_net.check_shape(shape, who)
        _init_net.check_init_net(init_net, who)
        layout = self._param_layout(layout)
        tags = check_tags(tags, who)
        _init_net.check_names_free(init_net, _init_net.scoped(self._variable_names(param_name)))
        info = self._create(param_name, shape, dtype, trainable, layout)
        info.tags = tags
        track(init_net, info)
        return info

    def _variable_names(self, param_name):
        """The names of the variables ``create_param`` makes for ``param_name``."""
        return [param_name]

    def _create(self, name, shape, dtype, trainable, layout):
        value = self._fill_for_param(layout)(shape, dtype)
        tf = _backend.tensorflow(_FEATURE)
        variable = tf.Variable(value, name=name, trainable=trainable)
        return ParameterInfo(variable, shape)

    def __call__(self, shape, dtype=None, layout=None):
        return self._require_fill()(shape, dtype, layout=layout)

    def get_config(self):
        kwargs = self.fill.get_config() if self.fill is not None else dict(self.operator_kwargs)
        return {"operator_name": self.operator_name, **kwargs}

    def __repr__(self):
        args = "".join(f", {k}={v!r}" for k, v in self.operator_kwargs.items())
        return f"{type(self).__name__}({self.operator_name!r}{args})"


class _FP16PairInitializer(Initializer):
    """Shared by the two PseudoFP16 initializers: the fill runs in fp32 into the master."""

    mode = None

    def __init__(self, operator_name=None, compute_dtype="float16", **kwargs):
        self.spec = PairSpec(self.mode, parse_compute_dtype(compute_dtype, type(self).__name__))
        super().__init__(operator_name, **kwargs)

    @property
    def compute_dtype(self):
        """The name of the copy's 16-bit dtype (``"float16"`` or ``"bfloat16"``)."""
        return self.spec.compute_dtype

    def _variable_names(self, param_name):
        return [param_name, param_name + self.spec.other_suffix]

    @property
    def primary_dtype(self):
        """The name of the primary variable's dtype."""
        return self.spec.primary_dtype

    def _check_fill(self, fill):
        own = getattr(fill, "dtype", None) or fill.default_dtype
        if own is not None and not keras.backend.is_float_dtype(own):
            raise ValueError(
                f"{type(self).__name__}: fill operator {fill.op_name} gives {own} values; a "
                f"16-bit float copy with an fp32 master needs a floating fill (Caffe2's "
                f"FloatToHalf takes float32 only). Use Initializer for integer parameters."
            )

    def _check_dtype(self, dtype):
        if dtype is None:
            return self.primary_dtype
        asked = dtype_name(dtype)
        if asked is None:
            raise ValueError(
                f"{type(self).__name__}: Argument `dtype` must be a dtype name such as "
                f"'float16' or 'float32'. Received: dtype={dtype!r}."
            )
        if not keras.backend.is_float_dtype(asked):
            kind = "integer" if keras.backend.is_int_dtype(asked) else "non-float"
            raise ValueError(
                f"{type(self).__name__}: refusing {kind} dtype {asked}; only floating "
                f"parameters get an fp32 master and a 16-bit copy. Use Initializer instead."
            )
        return asked

    def _create(self, name, shape, dtype, trainable, layout):
        dtype = self._check_dtype(dtype)
        if dtype != self.primary_dtype:
            raise ValueError(
                f"{type(self).__name__}: the primary variable {name!r} is "
                f"{self.primary_dtype}, so Argument `dtype` must be None or "
                f"{self.primary_dtype}. Received: dtype={dtype}."
            )
        value = self._fill_for_param(layout)(shape, "float32")
        return create_pair(name, value, self.spec, trainable=trainable)

    def __call__(self, shape, dtype=None, layout=None):
        """The fill's values drawn in fp32, cast to ``dtype`` (default: the primary's).

        Raises:
            RuntimeError: called outside ``tfinit.mixed_precision.scope``.
            ValueError: called inside a scope of another mode or compute dtype.
        """
        check_initializer_scope(type(self).__name__, self.spec, self.operator_name)
        dtype = self._check_dtype(dtype)
        return distributed(
            keras.ops.cast(self._require_fill()(shape, "float32"), dtype), layout)

    def get_config(self):
        return {**super().get_config(), "compute_dtype": self.spec.compute_dtype}


@keras.saving.register_keras_serializable(package="tfinit")
class PseudoFP16Initializer(_FP16PairInitializer):
    """Primary ``P`` is 16-bit, the fp32 master ``P_fp32`` is ``blob_copy[tf.float32]``.

    As Caffe2: the fill writes ``P_fp32``, then ``P = FloatToHalf(P_fp32)``; so
    ``P == cast(P_fp32)`` exactly. ``compute_dtype="bfloat16"`` makes ``P`` bfloat16.
    The master is not trainable: optimizers reach it through ``blob_copy``. As a Keras
    initializer (``kernel_initializer=``) it works inside
    ``tfinit.mixed_precision.scope("pseudo_fp16", compute_dtype=...)`` of its own dtype, which
    makes the pair from its fp32 values; elsewhere it refuses (a layer would get a plain
    variable with no master).

    Args:
        operator_name: a floating Caffe2 fill operator name, or ``None`` (see ``update``).
        compute_dtype: ``"float16"`` (default) or ``"bfloat16"``.
        **kwargs: the operator's Caffe2 arguments.

    Raises:
        ValueError: a non-floating fill, a bad ``compute_dtype``, an unknown operator;
            at ``create_param``, a ``dtype`` other than the 16-bit one; as a Keras
            initializer, inside a scope of another mode or dtype.
        RuntimeError: as a Keras initializer, outside ``tfinit.mixed_precision.scope``.

    Example:

    >>> import tensorflow as tf, tfinit
    >>> init = tfinit.PseudoFP16Initializer("XavierFill", seed=1)
    >>> info = init.create_param(param_name="p", shape=[3, 2])
    >>> info.param.dtype.name, info.blob_copy[tf.float32].dtype.name
    ('float16', 'float32')
    >>> bool(tf.reduce_all(info.param == tf.cast(info.blob_copy[tf.float32], tf.float16)))
    True
    """

    mode = Mode.PSEUDO_FP16


@keras.saving.register_keras_serializable(package="tfinit")
class ReversePseudoFP16Initializer(_FP16PairInitializer):
    """Primary ``P`` is fp32; the copy ``P_fp16`` (``P_bf16``) is in ``blob_copy``.

    As Caffe2: the fill writes ``P``, then ``P_fp16 = FloatToHalf(P)``; so
    ``P_fp16 == cast(P)`` exactly. The copy is not trainable. As a Keras initializer it works
    inside ``tfinit.mixed_precision.scope("reverse", compute_dtype=...)`` of its own dtype;
    elsewhere it refuses.

    Args:
        operator_name: a floating Caffe2 fill operator name, or ``None`` (see ``update``).
        compute_dtype: ``"float16"`` (default; copy ``P_fp16``) or ``"bfloat16"``
            (copy ``P_bf16``).
        **kwargs: the operator's Caffe2 arguments.

    Raises:
        ValueError: a non-floating fill, a bad ``compute_dtype``, an unknown operator;
            at ``create_param``, a ``dtype`` other than float32; as a Keras initializer,
            inside a scope of another mode or dtype.
        RuntimeError: as a Keras initializer, outside ``tfinit.mixed_precision.scope``.

    Example:

    >>> import tensorflow as tf, tfinit
    >>> init = tfinit.ReversePseudoFP16Initializer("ConstantFill", value=0.1,
    ...                                            compute_dtype="bfloat16")
    >>> info = init.create_param(param_name="q", shape=[2])
    >>> info.param.dtype.name, sorted(d.name for d in info.blob_copy)
    ('float32', ['bfloat16'])
    >>> info.blob_copy[tf.bfloat16].numpy().tolist()
    [0.10009765625, 0.10009765625]
    """

    mode = Mode.REVERSE


class ExternalInitializer:
    """The value is provided, never generated (Caffe2's ``ExternalInitializer``).

    Caffe2 did no sanity checks; here the stored array must have exactly the asked
    ``shape`` (and ``dtype`` when one is asked), or ``ValueError``; a missing name is a
    ``KeyError`` naming the parameter and the source, with a few names it holds.
    Values are never converted. Needs the TensorFlow backend to create variables.

    Args:
        source: a mapping of name -> array, an ``.npz`` path, a Caffe2 ``init_net``
            (``.pb`` path or bytes), a TensorFlow checkpoint (prefix, ``.index`` file,
            directory or reader), or a ``tfinit.sources.Source``.

    Raises:
        TypeError, FileNotFoundError, ValueError: a source that cannot be opened.

    Example:

    >>> import numpy as np, tfinit
    >>> init = tfinit.ExternalInitializer({"fc_w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    >>> init.create_param(param_name="fc_w", shape=[2, 3]).param.numpy().tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    >>> init.create_param(param_name="fc_b", shape=[3])
    Traceback (most recent call last):
    ...
    KeyError: "Parameter 'fc_b' is not in a mapping of 1 arrays; it holds 'fc_w'."
    """

    def __init__(self, source):
        self.source = open_source(source)

    def create_param(self, param_name, shape, init_net=None, *, dtype=None, trainable=True,
                     tags=None):
        """Variable ``param_name`` holding the source's array of that name.

        Args:
            param_name: the name to look up in the source and to give the variable.
            shape: the shape the stored array must have.
            init_net: where to track the variable (as ``Initializer.create_param``).
            dtype: when given, the dtype the stored array must have.
            trainable: whether the variable is trainable.
            tags: Caffe2's ``ParameterTags`` (as ``Initializer.create_param``).

        Returns:
            The :class:`ParameterInfo` of the created variable.

        Raises:
            KeyError: ``param_name`` is not in the source.
            ValueError: the stored shape or dtype differs from the asked one.
        """
        tf = _backend.tensorflow(_FEATURE)
        who = type(self).__name__
        param_name = _init_net.check_param_name(param_name, who)
        shape = _init_net.check_shape(shape, who)
        _init_net.check_init_net(init_net, who)
        tags = check_tags(tags, who)
        _init_net.check_names_free(init_net, _init_net.scoped([param_name]))
        value = self.source.get(param_name)
        if tuple(value.shape) != shape:
            hint = ""
            if len(shape) == 2 and tuple(value.shape) == shape[::-1]:
                hint = " (transposed: Caffe2 stores FC weights [out, in], Keras [in, out])"
            raise ValueError(
                f"{who}: parameter {param_name!r} was asked with shape {shape} but {self.source} "
                f"holds shape {tuple(value.shape)}{hint}."
            )
        stored = tf.as_dtype(value.dtype)
        if dtype is not None and tf.as_dtype(dtype) != stored:
            raise ValueError(
                f"{who}: parameter {param_name!r} was asked as {tf.as_dtype(dtype).name} but "
                f"{self.source} holds {stored.name}; values are not converted."
            )
        if isinstance(value, np.ndarray):
            value = _backend.tf_tensor_from_numpy(value)
        variable = tf.Variable(value, name=param_name, trainable=trainable)
        info = ParameterInfo(variable, shape, tags=tags)
        track(init_net, info)
        return info

    def __repr__(self):
        return f"ExternalInitializer({self.source})"


def update_initializer(initializer_class, operator_name_and_kwargs,
                       default_operator_name_and_kwargs):
    """An initializer instance from brew's ``WeightInitializer=`` / ``weight_init=``.

    Caffe2's four cases: the class (``Initializer`` when None) is built with
    ``operator_name_and_kwargs``, or with the default when that is None. The class must be
    a class or factory (``functools.partial(PseudoFP16Initializer, compute_dtype=...)``),
    not an instance, and cannot be ``ExternalInitializer`` (it takes no operator; Caffe2
    fails with ``TypeError`` too).

    Args:
        initializer_class: an initializer class or factory, or ``None`` for ``Initializer``.
        operator_name_and_kwargs: ``(operator_name, kwargs_dict)`` or ``None``.
        default_operator_name_and_kwargs: the pair used when the one above is ``None``.

    Returns:
        ``initializer_class(operator_name, **kwargs)``.

    Raises:
        TypeError: a malformed pair, an instance instead of a class, or
            ``ExternalInitializer``.

    Example:

    >>> import tfinit
    >>> init = tfinit.update_initializer(None, None, ("ConstantFill", {"value": 0.5}))
    >>> type(init).__name__, init.operator_name, init.operator_kwargs
    ('Initializer', 'ConstantFill', {'value': 0.5})
    >>> tfinit.update_initializer(tfinit.PseudoFP16Initializer, ("MSRAFill", {}),
    ...                           ("ConstantFill", {})).operator_name
    'MSRAFill'
    """
    args = operator_name_and_kwargs or default_operator_name_and_kwargs
    if (not isinstance(args, (tuple, list)) or len(args) != 2 or not isinstance(args[0], str)
            or not isinstance(args[1], Mapping)):
        raise TypeError(
            "update_initializer: Argument `operator_name_and_kwargs` (or the default) must be "
            "an (operator_name, kwargs_dict) pair such as ('XavierFill', {}). "
            f"Received: {args!r}."
        )
    if initializer_class is None:
        initializer_class = Initializer
    if isinstance(initializer_class, (Initializer, ExternalInitializer)) or not callable(
            initializer_class):
        raise TypeError(
            f"update_initializer: Argument `initializer_class` must be a class (brew's "
            f"WeightInitializer=Initializer) or a factory; pass instances to create_param "
            f"directly. Received: an instance of {type(initializer_class).__name__}."
        )
    if isinstance(initializer_class, type) and issubclass(initializer_class, ExternalInitializer):
        raise TypeError(
            "update_initializer: ExternalInitializer takes no fill operator (Caffe2: "
            "'ExternalInitializer() takes no arguments'); pass ExternalInitializer(source) "
            "to create_param instead."
        )
    return initializer_class(args[0], **args[1])
