"""The rules of an fp32-master / 16-bit-copy pair, parsed once at the boundary.

A :class:`PairSpec` says which mode a pair follows and which 16-bit dtype its copy has:

- ``Mode.PSEUDO_FP16`` (Caffe2's PseudoFP16Initializer): the code sees the 16-bit copy;
  the fp32 master sits beside it and the optimizer updates the master.
- ``Mode.REVERSE`` (Caffe2's ReversePseudoFP16Initializer): the code sees the fp32
  variable (the master); the 16-bit copy rides along.

A pair keeps its fp32 master in one of two ways (:class:`Master`):

- ``Master.FP32`` (the default): a float32 variable beside the 16-bit copy.
- ``Master.SPLIT`` (pseudo_fp16 with bfloat16 only): no float32 variable; the bfloat16 copy
  is the master's top half (rounded to nearest even) and an int16 *remainder* variable holds
  the rest, so the master is rebuilt exactly from the two (``tfinit._split_master``).
- ``Master.STOCHASTIC`` (pseudo_fp16 with bfloat16 only): no master at all; the optimizer's
  fp32 update of the widened bfloat16 weight is rounded back stochastically
  (``tfinit._stochastic_rounding``). The pair's other variable is an empty int16 placeholder.

The stack of entered mixed-precision scopes lives here too (:func:`scope_stack`), so that code
below ``tfinit.mixed_precision`` (the PseudoFP16 initializers) can ask which scope is active
(:func:`active_spec`) without importing it.

Dtypes are dtype *names* here (``"float16"``, ``"bfloat16"``, ``"float32"``), so this module
runs on every Keras backend. Strings, ``tf.DType``, numpy dtypes and ``ml_dtypes.bfloat16``
are all accepted by :func:`parse_compute_dtype`.
"""

import dataclasses
import enum
import threading

import keras

#: the 16-bit float types a copy can have
COMPUTE_DTYPES = ("float16", "bfloat16")
MASTER_DTYPE = "float32"
#: the name suffix Caffe2 gave the other variable of a pair
SUFFIXES = {"float32": "_fp32", "float16": "_fp16", "bfloat16": "_bf16"}


class Mode(enum.Enum):
    """Which variable of a pair the model's code sees."""

    PSEUDO_FP16 = "pseudo_fp16"
    REVERSE = "reverse"


MODES = tuple(mode.value for mode in Mode)


class Master(enum.Enum):
    """How a pair stores its fp32 master."""

    FP32 = "fp32"
    SPLIT = "split"
    STOCHASTIC = "stochastic"


MASTERS = tuple(master.value for master in Master)
#: the dtype of a split pair's remainder variable, and its name suffix
REMAINDER_DTYPE = "int16"
REMAINDER_SUFFIX = "_rem"
#: the name suffix of a stochastic pair's empty placeholder variable
STOCHASTIC_SUFFIX = "_sr"


@dataclasses.dataclass(frozen=True)
class PairSpec:
    """One pair's rules: its mode, the 16-bit dtype of its copy, how its master is stored."""

    mode: Mode
    compute_dtype: str
    master: Master = Master.FP32

    @property
    def is_split(self):
        """True when the master is the bfloat16 copy plus an int16 remainder (no fp32 variable)."""
        return self.master is Master.SPLIT

    @property
    def is_stochastic(self):
        """True when there is no master: the bfloat16 weight is updated with stochastic
        rounding."""
        return self.master is Master.STOCHASTIC

    @property
    def is_pseudo(self):
        """True when the code sees the 16-bit copy (pseudo_fp16)."""
        return self.mode is Mode.PSEUDO_FP16

    @property
    def primary_dtype(self):
        """The dtype of the variable the code sees."""
        return self.compute_dtype if self.is_pseudo else MASTER_DTYPE

    @property
    def other_dtype(self):
        """The dtype of the variable in ``ParameterInfo.blob_copy`` (split: the remainder's)."""
        if self.is_split or self.is_stochastic:
            return REMAINDER_DTYPE
        return MASTER_DTYPE if self.is_pseudo else self.compute_dtype

    @property
    def other_suffix(self):
        """The name suffix of the ``blob_copy`` variable (``_fp32``, ``_fp16``, ``_bf16``,
        split: ``_rem``)."""
        if self.is_stochastic:
            return STOCHASTIC_SUFFIX
        return REMAINDER_SUFFIX if self.is_split else SUFFIXES[self.other_dtype]

    @property
    def keras_policy_name(self):
        """The Keras dtype policy whose variable and compute dtypes this pair matches."""
        return self.compute_dtype if self.is_pseudo else f"mixed_{self.compute_dtype}"


def parse_mode(mode, who):
    """``mode`` (a string or a :class:`Mode`) as a :class:`Mode`.

    Raises:
        ValueError: ``mode`` is neither ``"pseudo_fp16"`` nor ``"reverse"``.
    """
    if isinstance(mode, Mode):
        return mode
    for known in Mode:
        if mode == known.value:
            return known
    raise ValueError(f"{who}: argument `mode` must be one of {MODES}. Received: mode={mode!r}")


def dtype_name(dtype):
    """``dtype`` (string, ``tf.DType``, numpy dtype or type) as a standard name, or None."""
    try:
        return keras.backend.standardize_dtype(dtype)
    except (TypeError, ValueError, AttributeError):
        return None


def parse_compute_dtype(compute_dtype, who):
    """``compute_dtype`` as ``"float16"`` or ``"bfloat16"``.

    Raises:
        ValueError: any other dtype (the message says so, and that fp32 needs no pair).
    """
    name = dtype_name(compute_dtype) if compute_dtype is not None else None
    if name not in COMPUTE_DTYPES:
        raise ValueError(
            f"{who}: argument `compute_dtype` must be 'float16' or 'bfloat16' (the 16-bit copy "
            f"of an fp32 master; fp32 training needs no pair). Received: "
            f"compute_dtype={compute_dtype!r}"
        )
    return name


def parse_master(master, who):
    """``master`` (a string or a :class:`Master`) as a :class:`Master`.

    Raises:
        ValueError: ``master`` is not ``"fp32"``, ``"split"`` or ``"stochastic"``.
    """
    if isinstance(master, Master):
        return master
    for known in Master:
        if master == known.value:
            return known
    raise ValueError(
        f"{who}: argument `master` must be one of {MASTERS}. Received: master={master!r}")


def pair_spec(mode, compute_dtype, who, master=Master.FP32):
    """The :class:`PairSpec` of ``mode``, ``compute_dtype`` and ``master``, all checked.

    Raises:
        ValueError: a bad argument, or ``master="split"`` or ``"stochastic"`` with float16
            or in reverse mode.
    """
    spec = PairSpec(parse_mode(mode, who), parse_compute_dtype(compute_dtype, who),
                    parse_master(master, who))
    if spec.is_stochastic:
        _check_stochastic(spec, who)
    if spec.is_split and spec.compute_dtype != "bfloat16":
        raise ValueError(
            f"{who}: argument `master` must be 'fp32' when compute_dtype="
            f"{spec.compute_dtype!r}: a split master is a bfloat16 copy plus a 16-bit "
            "remainder, and only bfloat16 is the top half of a float32 (float16 has another "
            "exponent and fraction). Received: master='split'"
        )
    if spec.is_split and not spec.is_pseudo:
        raise ValueError(
            f"{who}: argument `master` must be 'fp32' in mode='reverse': there the variable "
            "the code sees is the fp32 master itself, so there is no separate master to "
            "split. Use mode='pseudo_fp16' with compute_dtype='bfloat16'. "
            "Received: master='split'"
        )
    return spec


def _check_stochastic(spec, who):
    """``master="stochastic"`` rounds a float32 to bfloat16 by its discarded low 16 bits."""
    if spec.compute_dtype != "bfloat16":
        raise ValueError(
            f"{who}: argument `master` must be 'fp32' (not 'stochastic') when "
            f"compute_dtype={spec.compute_dtype!r}: stochastic rounding drops the low 16 bits "
            "of a float32, which gives a bfloat16 only (float16 has another exponent range, "
            "and its updates need loss scaling, whose skipped steps a weight without a "
            "master cannot undo exactly). Use compute_dtype='bfloat16'. "
            "Received: master='stochastic'")
    if not spec.is_pseudo:
        raise ValueError(
            f"{who}: argument `master` must be 'fp32' in mode='reverse': there the layer "
            "holds the fp32 variable itself, so there is no 16-bit weight to round "
            "stochastically. Use mode='pseudo_fp16' with compute_dtype='bfloat16'. "
            "Received: master='stochastic'")


_scopes = threading.local()


def scope_stack():
    """This thread's stack of entered ``tfinit.mixed_precision`` scopes (objects with a
    ``spec``), innermost last; ``tfinit.mixed_precision`` pushes and pops it."""
    if not hasattr(_scopes, "stack"):
        _scopes.stack = []
    return _scopes.stack


def active_spec():
    """The :class:`PairSpec` of the innermost active scope in this thread, or None."""
    stack = scope_stack()
    return stack[-1].spec if stack else None


def check_initializer_scope(name, spec, operator_name):
    """A pair initializer (``name``, of ``spec``) used as a Keras initializer: the pair is
    made by the active ``mixed_precision.scope``, so outside one a layer would get a plain
    variable (no master, no copy), and a scope of another mode or dtype would silently
    override the initializer's.

    Raises:
        RuntimeError: no scope is active.
        ValueError: the active scope's mode or compute dtype is not ``spec``'s.
    """
    wanted = (f"tfinit.mixed_precision.scope({spec.mode.value!r}, "
              f"compute_dtype={spec.compute_dtype!r})")
    scope = active_spec()
    if scope is None:
        raise RuntimeError(
            f"{name} used as a Keras initializer outside a mixed-precision scope: the "
            f"layer would get a plain variable with no fp32 master and no 16-bit copy. "
            f"Build the model inside `with {wanted}:` (it pairs every layer's weights; "
            f"this initializer then gives the fp32 values), or create the pair with "
            f"{name}(...).create_param(param_name=, shape=)."
        )
    if (scope.mode, scope.compute_dtype) != (spec.mode, spec.compute_dtype):
        raise ValueError(
            f"{name}(compute_dtype={spec.compute_dtype!r}) is a "
            f"{spec.mode.value} {spec.compute_dtype} initializer, but it is used "
            f"inside tfinit.mixed_precision.scope({scope.mode.value!r}, "
            f"compute_dtype={scope.compute_dtype!r}), whose mode and dtype make the pair. "
            f"Use the scope {wanted}, or an initializer that agrees with the scope "
            f"(or a plain fill such as tfinit.get({operator_name!r}))."
        )
