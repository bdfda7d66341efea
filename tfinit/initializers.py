"""Caffe2's initializer family (``caffe2/python/modeling/initializers.py``) on TF variables.

Same contract as Caffe2: ``Initializer(operator_name=None, **kwargs)`` names a fill
operator and its arguments, ``update`` sets them once, ``create_param(param_name=,
shape=, init_net=)`` creates the parameter and returns its ``ParameterInfo``. Where Caffe2
added an operator to ``init_net`` writing blob ``P``, tfinit creates the ``tf.Variable``
``P`` at once (prefixed by any enclosing ``tf.name_scope``, as Caffe2's name scope
prefixes blob names).

``init_net`` (optional) is where the created variables are tracked so that checkpoints
save them: a ``tf.Module`` (or any other TensorFlow trackable, e.g. ``tf.train.Checkpoint``)
gets them in its dict attribute ``tfinit_params`` (name -> variable; checkpoint keys
``<path>/tfinit_params/<name>/.ATTRIBUTES/VARIABLE_VALUE``); a ``dict`` gets them as items.
Every variable of a parameter is tracked: ``P`` and its ``P_fp32``/``P_fp16``/``P_bf16``.
Creating a name twice in one ``init_net`` is a ``ValueError``. A Keras layer or model is
refused as ``init_net`` (``TypeError``): it tracks only ``keras.Variable``s, so its
checkpoints would silently miss the variables.

Without a seed in the operator's arguments, every ``create_param`` draws new values, as
each Caffe2 fill operator without a seed did; with a seed, values repeat. Used as a Keras
initializer (``__call__(shape, dtype)``), an ``Initializer`` follows Keras's seed rules.
"""

import inspect
from collections.abc import Mapping, MutableMapping

import keras
import numpy as np

from tfinit import _backend, _fans, _split_master, fills, registry
from tfinit._precision import Mode, PairSpec, dtype_name, pair_spec, parse_compute_dtype
from tfinit.parameter_info import ParameterInfo, variable_name
from tfinit.sources import open_source

tf = _backend.lazy_tensorflow("creating TensorFlow variables (create_param)")

TRACKING_ATTRIBUTE = "tfinit_params"


# ---------------------------------------------------------------- shared checks


def _check_param_name(param_name, who):
    if not isinstance(param_name, str) or not param_name:
        raise TypeError(
            f"{who}.create_param: param_name must be a non-empty string, got "
            f"{type(param_name).__name__}: {param_name!r}."
        )
    return param_name


def _check_shape(shape, who):
    try:
        return fills._normalize_shape(shape, f"{who}.create_param")
    except TypeError as err:
        raise TypeError(
            f"{err} tfinit's signature is create_param(param_name, shape, init_net=None); "
            f"Caffe2's positional order was (param_name, init_net, shape): pass keywords."
        ) from None


def _check_init_net(init_net, who):
    if init_net is None or isinstance(init_net, MutableMapping):
        return
    if isinstance(init_net, keras.layers.Layer):
        raise TypeError(
            f"{who}.create_param: init_net is a Keras {type(init_net).__name__}, which tracks "
            f"only keras.Variables, so its checkpoints would silently miss these variables. "
            f"Pass a tf.Module (or a dict), or create Keras weights with add_weight."
        )
    from tfinit import _keras_internals

    if not _keras_internals.is_trackable(init_net):
        raise TypeError(
            f"{who}.create_param: init_net must be None, a tf.Module (or another TensorFlow "
            f"trackable) or a dict to track the variables in; got {type(init_net).__name__}."
        )


def _store(init_net, create=False):
    """The name -> variable container of ``init_net`` (None if it has none yet)."""
    if isinstance(init_net, MutableMapping):
        return init_net
    if getattr(init_net, TRACKING_ATTRIBUTE, None) is None:
        if not create:
            return None
        setattr(init_net, TRACKING_ATTRIBUTE, {})
    store = getattr(init_net, TRACKING_ATTRIBUTE)
    from tfinit import _keras_internals

    if not _keras_internals.is_tracked_container(store):
        raise TypeError(
            f"init_net {type(init_net).__name__}.{TRACKING_ATTRIBUTE} is a "
            f"{type(store).__name__}, which TensorFlow checkpoints do not track."
        )
    return store


def _check_names_free(init_net, names):
    store = None if init_net is None else _store(init_net)
    taken = [n for n in names if store is not None and n in store]
    if taken:
        raise ValueError(
            f"init_net already holds a variable named {taken[0]!r}; parameter names must be "
            f"unique within one init_net."
        )


def _scoped(names):
    """``names`` as the variables will be named inside the current ``tf.name_scope``."""
    scope = tf.get_current_name_scope()
    return [f"{scope}/{n}" if scope else n for n in names]


def track(init_net, info):
    """Record every variable of ``info`` in ``init_net`` (see the module docstring)."""
    if init_net is None:
        return
    names = [variable_name(v) for v in info.variables]
    _check_names_free(init_net, names)
    store = _store(init_net, create=True)
    for name, variable in zip(names, info.variables):
        store[name] = variable


def _tf_variable(initial_value, name, dtype, trainable):
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
    other_name = name + spec.other_suffix
    if spec.is_split:
        # No fp32 variable: the bfloat16 copy and an int16 remainder hold the master exactly.
        copy_value, remainder = _split_master.split(master_value)
        other = make_variable(initial_value=remainder, name=other_name,
                              dtype=spec.other_dtype, trainable=False)
        primary = make_variable(initial_value=copy_value, name=name,
                                dtype=spec.compute_dtype, trainable=trainable)
    elif spec.is_pseudo:
        master = make_variable(initial_value=master_value, name=other_name,
                               dtype=tf.float32, trainable=False)
        primary = make_variable(initial_value=copy_value, name=name,
                                dtype=spec.compute_dtype, trainable=trainable)
        other = master
    else:
        primary = make_variable(initial_value=master_value, name=name, dtype=tf.float32,
                                trainable=trainable)
        other = make_variable(initial_value=copy_value, name=other_name,
                              dtype=spec.compute_dtype, trainable=False)
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
            f"{operator_name}: operator kwargs must be a dict, got {type(kwargs).__name__}."
        )
    kwargs = dict(kwargs)
    cls = registry.lookup(operator_name)
    if "layout" in kwargs and "layout" not in inspect.signature(cls.__init__).parameters:
        _fans.check_layout(kwargs.pop("layout"), operator_name)
    return registry.build(operator_name, kwargs)


@keras.saving.register_keras_serializable(package="tfinit")
class Initializer(keras.initializers.Initializer):
    """Creates a parameter filled by a Caffe2 fill operator (Caffe2's ``Initializer``).

    ``Initializer("MSRAFill", layout="caffe2")``; an unknown operator name or argument
    fails here, with the fill registry's error. Also a Keras initializer:
    ``Dense(4, kernel_initializer=Initializer("XavierFill"))``.
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

    def _fill_for_param(self):
        fill = self._require_fill()
        if isinstance(fill, fills.RandomFill) and self.operator_kwargs.get("seed") is None:
            # A fresh unseeded operator per parameter, as Caffe2: new values every time.
            fill = build_fill(self.operator_name, self.operator_kwargs)
        return fill

    def create_param(self, param_name, shape, init_net=None, *, dtype=None, trainable=True):
        """Create variable ``param_name`` of exactly ``shape``; its ``ParameterInfo``.

        ``dtype``: the variable's dtype (default: the fill's own, then Keras's floatx).
        """
        who = type(self).__name__
        param_name = _check_param_name(param_name, who)
        shape = _check_shape(shape, who)
        _check_init_net(init_net, who)
        _check_names_free(init_net, _scoped(self._variable_names(param_name)))
        info = self._create(param_name, shape, dtype, trainable)
        track(init_net, info)
        return info

    def _variable_names(self, param_name):
        """The names of the variables ``create_param`` makes for ``param_name``."""
        return [param_name]

    def _create(self, name, shape, dtype, trainable):
        value = self._fill_for_param()(shape, dtype)
        variable = tf.Variable(value, name=name, trainable=trainable)
        return ParameterInfo(variable, shape)

    def __call__(self, shape, dtype=None):
        return self._require_fill()(shape, dtype)

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
            raise ValueError(f"{type(self).__name__}: unknown dtype {dtype!r}.")
        if not keras.backend.is_float_dtype(asked):
            kind = "integer" if keras.backend.is_int_dtype(asked) else "non-float"
            raise ValueError(
                f"{type(self).__name__}: refusing {kind} dtype {asked}; only floating "
                f"parameters get an fp32 master and a 16-bit copy. Use Initializer instead."
            )
        return asked

    def _create(self, name, shape, dtype, trainable):
        dtype = self._check_dtype(dtype)
        if dtype != self.primary_dtype:
            raise ValueError(
                f"{type(self).__name__}: the primary variable {name!r} is "
                f"{self.primary_dtype}, so dtype must be None or {self.primary_dtype}; "
                f"got {dtype}."
            )
        value = self._fill_for_param()(shape, "float32")
        return create_pair(name, value, self.spec, trainable=trainable)

    def __call__(self, shape, dtype=None):
        """The fill's values drawn in fp32, cast to ``dtype`` (default: the primary's)."""
        dtype = self._check_dtype(dtype)
        return keras.ops.cast(self._require_fill()(shape, "float32"), dtype)

    def get_config(self):
        return {**super().get_config(), "compute_dtype": self.spec.compute_dtype}


@keras.saving.register_keras_serializable(package="tfinit")
class PseudoFP16Initializer(_FP16PairInitializer):
    """Primary ``P`` is 16-bit, the fp32 master ``P_fp32`` is ``blob_copy[tf.float32]``.

    As Caffe2: the fill writes ``P_fp32``, then ``P = FloatToHalf(P_fp32)``; so
    ``P == cast(P_fp32)`` exactly. ``compute_dtype="bfloat16"`` makes ``P`` bfloat16.
    """

    mode = Mode.PSEUDO_FP16


@keras.saving.register_keras_serializable(package="tfinit")
class ReversePseudoFP16Initializer(_FP16PairInitializer):
    """Primary ``P`` is fp32; the copy ``P_fp16`` (``P_bf16``) is in ``blob_copy``.

    As Caffe2: the fill writes ``P``, then ``P_fp16 = FloatToHalf(P)``.
    """

    mode = Mode.REVERSE


class ExternalInitializer:
    """The value is provided, never generated (Caffe2's ``ExternalInitializer``).

    ``source``: see ``tfinit.sources.open_source`` (mapping, ``.npz``, TF checkpoint,
    Caffe2 init_net). Caffe2 did no sanity checks; here the stored array must have exactly
    the asked ``shape`` (and ``dtype`` when one is asked), or ``ValueError``; a missing
    name is a ``KeyError`` naming the parameter and the source.
    """

    def __init__(self, source):
        self.source = open_source(source)

    def create_param(self, param_name, shape, init_net=None, *, dtype=None, trainable=True):
        """Variable ``param_name`` holding the source's array of that name."""
        who = type(self).__name__
        param_name = _check_param_name(param_name, who)
        shape = _check_shape(shape, who)
        _check_init_net(init_net, who)
        _check_names_free(init_net, _scoped([param_name]))
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
            value = fills.tf_tensor_from_numpy(value)
        variable = tf.Variable(value, name=param_name, trainable=trainable)
        info = ParameterInfo(variable, shape)
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
    """
    args = operator_name_and_kwargs or default_operator_name_and_kwargs
    if (not isinstance(args, (tuple, list)) or len(args) != 2 or not isinstance(args[0], str)
            or not isinstance(args[1], Mapping)):
        raise TypeError(
            "update_initializer: operator_name_and_kwargs (or the default) must be an "
            f"(operator_name, kwargs_dict) pair such as ('XavierFill', {{}}); got {args!r}."
        )
    if initializer_class is None:
        initializer_class = Initializer
    if isinstance(initializer_class, (Initializer, ExternalInitializer)) or not callable(
            initializer_class):
        raise TypeError(
            f"update_initializer: initializer_class must be a class (brew's "
            f"WeightInitializer=Initializer) or a factory, got an instance of "
            f"{type(initializer_class).__name__}; pass instances to create_param directly."
        )
    if isinstance(initializer_class, type) and issubclass(initializer_class, ExternalInitializer):
        raise TypeError(
            "update_initializer: ExternalInitializer takes no fill operator (Caffe2: "
            "'ExternalInitializer() takes no arguments'); pass ExternalInitializer(source) "
            "to create_param instead."
        )
    return initializer_class(args[0], **args[1])
