"""``state_dtype="int8"``: the inner optimizer's moments stored in 8 bits, blockwise.

Each per-variable slot of a paired variable (Adam's ``momentum`` and ``velocity``, SGD's
``momentum``...) is stored as two optimizer variables: ``codes`` (uint8, one byte per element,
shape ``(blocks, block)``) and ``scales`` (float32, one per block: the block's absolute
maximum). An element is ``scales[b] * MAP[codes[b, i]]``. Blocks are ``BLOCK`` consecutive
elements of the flattened slot (a slot smaller than ``BLOCK`` is one block of its size; the
last block is zero-padded). The inner optimizer sees a :class:`QuantizedSlotRules` variable
(each backend makes its class), kept out of its ``variables``: its ``apply`` dequantizes
every slot once before the step and requantizes it once after it, so the step (the moments'
update and the master's) is computed in float32 on the exact master, as with float32 state,
and nothing float32-sized is stored between steps.

The maps (256 levels at most, sorted, ``0`` and ``1`` exact; a value is rounded to the nearest
level): a *dynamic* map of decades, as the 8-bit optimizer literature's dynamic tree
quantization (Dettmers et al. 2022, bitsandbytes; torchao's AdamW8bit): the levels of decade
``k = 0..6`` (``(10**(k-7), 10**(k-6)]`` of the block's maximum) are ``n_k`` equal steps up to
its top, with ``n_k`` doubling from the smallest decade to the largest, so near its block's
maximum a value's step is 0.9/64 (signed) or 0.9/128 (unsigned) of that maximum, and values
down to ``1e-6`` of the maximum keep one significant digit (below: zero). ``SIGNED`` (first
moments, momentum: ``n_k = 2**k``, 127 magnitudes, both signs and zero: 255 levels) and
``UNSIGNED`` (slots Keras's optimizers keep non-negative, :data:`NONNEGATIVE_SLOTS`:
``n_k = 2**(k+1)``, 254 levels and zero) differ only in where the eighth bit goes.

The rounding error of one element ``x`` of a block with maximum ``s`` is at most
``s * gap / 2`` (``gap``: the distance between the two levels around ``x / s``), plus the
float32 rounding of the division and product (:func:`error_bound`).
"""

import math

import keras
import numpy as np
from keras import ops

from tfinit import _keras_internals as internals
from tfinit._precision import MASTER_DTYPE

#: elements per block (one float32 scale each): 1 + 4/256 bytes per element
BLOCK = 256
#: the dtype of the codes
CODE_DTYPE = "uint8"
#: Keras optimizers' slot names whose values are never negative (squares, absolute maxima)
NONNEGATIVE_SLOTS = frozenset({"velocity", "velocity_hat", "accumulator", "norm",
                               "accumulated_grad", "accumulated_delta_var"})
_DECADES = 7
#: each decade's top (its largest level), a fraction of the block's maximum
_TOPS = 10.0 ** np.arange(1 - _DECADES, 1)
_WHO = "MasterWeightOptimizer"


def _decade_levels(per_decade):
    """The positive levels: decade ``k`` holds ``per_decade(k)`` equal steps up to
    ``10**(k-6)`` from ``10**(k-7)`` (its bottom is the decade below's top)."""
    levels = []
    for k in range(_DECADES):
        top, count = 10.0 ** (k + 1 - _DECADES), per_decade(k)
        levels += [top * (0.1 + 0.9 * (i + 1) / count) for i in range(count)]
    return np.asarray(levels, np.float64)


def _signed_map():
    positive = _decade_levels(lambda k: 2 ** k)  # 127
    return np.concatenate([-positive[::-1], [0.0], positive]).astype(np.float32)


def _unsigned_map():
    return np.concatenate([[0.0], _decade_levels(lambda k: 2 ** (k + 1))]).astype(np.float32)


#: the sorted levels of the two maps (float32; 255 each)
SIGNED = _signed_map()
UNSIGNED = _unsigned_map()


def map_for(slot_name):
    """The map of a slot named ``slot_name`` (Keras's name prefix of the slot)."""
    return UNSIGNED if slot_name in NONNEGATIVE_SLOTS else SIGNED


def block_size(size):
    """The block length of a slot of ``size`` elements."""
    return max(1, min(BLOCK, size))


def stored_shapes(shape):
    """``(codes shape, scales shape)`` of a slot of ``shape``."""
    size = math.prod(shape)
    block = block_size(size)
    blocks = -(-size // block)
    return (blocks, block), (blocks,)


def quantize(value, levels):
    """``(codes, scales)`` of ``value`` (any shape, cast to float32) on the map ``levels``
    (:data:`SIGNED` or :data:`UNSIGNED`): each element rounded to the nearest level of its
    block's scaled map (:func:`_nearest_codes`)."""
    flat = ops.reshape(ops.cast(value, MASTER_DTYPE), (-1,))
    (blocks, block), _ = stored_shapes(tuple(value.shape))
    padding = blocks * block - flat.shape[0]
    if padding:
        flat = ops.pad(flat, [(0, padding)])
    grouped = ops.reshape(flat, (blocks, block))
    scales = ops.max(ops.abs(grouped), axis=1)
    divisor = ops.where(ops.greater(scales, 0.0), scales, ops.ones_like(scales))
    normed = ops.divide(grouped, ops.expand_dims(divisor, 1))
    return ops.cast(_nearest_codes(normed, levels is SIGNED), CODE_DTYPE), scales


def _nearest_codes(normed, signed):
    """The index in the map of the level nearest each of ``normed`` (in [-1, 1]), computed
    element-wise (no search, no transcendental): the decade ``k`` by comparisons, the step
    in it by rounding."""
    extra = 0 if signed else 1  # n_k = 2**(k + extra)
    size = ops.abs(normed)
    # (a size on a decade's bottom counts in the decade above: the same nearest level)
    k = ops.digitize(size, [10.0 ** (j - _DECADES) for j in range(1, _DECADES)])
    top = ops.take(ops.convert_to_tensor(_TOPS, MASTER_DTYPE), k)
    count = ops.take(ops.convert_to_tensor(2.0 ** (np.arange(_DECADES) + extra), MASTER_DTYPE),
                     k)
    index = ops.clip(ops.round((size - 0.1 * top) / (0.9 * top / count)) - 1, -1, count - 1)
    # the lowest decade: between zero and its first level, the nearer one
    lowest = 10.0 ** (1 - _DECADES) * (0.1 + 0.9 / 2.0 ** extra)
    index = ops.where(ops.logical_and(ops.equal(k, 0), ops.greater_equal(size, lowest / 2)),
                      ops.maximum(index, 0), index)
    magnitude = count - 2.0 ** extra + 1 + index  # 0: zero; levels of lower decades first
    if not signed:
        return magnitude
    return ops.where(ops.less(normed, 0), 127 - magnitude, 127 + magnitude)


def dequantize(codes, scales, levels, shape):
    """The float32 value of ``shape`` that ``codes`` and ``scales`` store on ``levels``."""
    table = ops.convert_to_tensor(levels, MASTER_DTYPE)
    values = ops.multiply(ops.take(table, ops.cast(codes, "int32")),
                          ops.expand_dims(scales, 1))
    size = math.prod(shape)
    return ops.reshape(ops.reshape(values, (-1,))[:size], shape)


def error_bound(value, levels):
    """The largest rounding error :func:`quantize` + :func:`dequantize` may make on each
    element of ``value`` (numpy, float64): half the gap of the map levels around it, times
    its block's maximum, plus 2 float32 ulps of the value and of the maximum's level product."""
    value = np.asarray(value, np.float64)
    (blocks, block), _ = stored_shapes(value.shape)
    flat = np.zeros(blocks * block)
    flat[:value.size] = value.ravel()
    grouped = flat.reshape(blocks, block)
    scale = np.abs(grouped).max(axis=1, keepdims=True)
    normed = grouped / np.where(scale > 0, scale, 1)
    upper = np.clip(np.searchsorted(levels, normed), 1, len(levels) - 1)
    gap = levels[upper].astype(np.float64) - levels[upper - 1]
    ulp = np.finfo(np.float32).eps
    bound = scale * gap / 2 + 2 * ulp * (np.abs(grouped) + scale * 1e-30)
    return bound.ravel()[:value.size].reshape(value.shape)


class QuantizedSlotRules:
    """What a quantized slot is on every backend, mixed in ahead of its ``keras.Variable``
    class: reads dequantize ``codes`` and ``scales`` (the optimizer's stored variables), writes
    requantize into them (the backend's class routes its reads to :meth:`dequantized`); inside
    the inner optimizer's step (:meth:`open_step` ... :meth:`close_step`) it is one float32
    tensor. ``levels`` is its map. A backend's class makes the object without a float32 value
    of its own (:func:`install`'s ``make_slot``)."""

    def _quantized(self, codes, scales, levels):
        self._codes, self._scales, self._levels = codes, scales, levels
        self._step_value = None

    @property
    def codes(self):
        return self._codes

    @property
    def scales(self):
        return self._scales

    def dequantized(self):
        """The slot's float32 value (a tensor): inside a step the step's value, else the
        codes and scales dequantized."""
        if self._step_value is not None:
            return self._step_value
        return self._dequantize()

    def open_step(self):
        """Before the inner optimizer's step: the slot dequantized once, a float32 tensor
        its reads and writes (torch's in-place ones too) use until :meth:`close_step`."""
        self._step_value = self._dequantize()

    def close_step(self, store=True):
        """After it: the step's value requantized into codes and scales (``store``), and
        dropped."""
        value, self._step_value = self._step_value, None
        if store and value is not None:
            self._store(value)

    def _dequantize(self):
        """The codes and scales dequantized (a backend's class may compile it)."""
        return dequantize(self._codes.value, self._scales.value, self._levels,
                          tuple(self.shape))

    def _quantize(self, value):
        """``quantize(value, levels)`` (a backend's class may compile it)."""
        return quantize(value, self._levels)

    def _store(self, value):
        codes, scales = self._quantize(value)
        self._codes.assign(codes)
        self._scales.assign(scales)

    def numpy(self):
        return ops.convert_to_numpy(self.dequantized())

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def assign(self, value):
        value = ops.reshape(ops.convert_to_tensor(value, MASTER_DTYPE), tuple(self.shape))
        if self._step_value is not None:
            self._step_value = value
        else:
            self._store(value)
        return value

    def assign_add(self, value):
        return self.assign(ops.add(self.dequantized(), ops.cast(value, MASTER_DTYPE)))

    def assign_sub(self, value):
        return self.assign(ops.subtract(self.dequantized(), ops.cast(value, MASTER_DTYPE)))


def refuse_without_moments(optimizer):
    """ValueError for an inner optimizer known to keep no per-variable state (SGD without
    momentum) with ``state_dtype="int8"``."""
    if isinstance(optimizer, keras.optimizers.SGD) and not optimizer.momentum:
        _no_moments(optimizer)


def _no_moments(optimizer):
    kind = type(optimizer).__name__
    raise ValueError(
        f"{_WHO}: Argument `state_dtype='int8'` quantizes the inner optimizer's per-variable "
        f"moments, but {kind} keeps none for the paired variables (e.g. SGD without "
        "momentum). Use state_dtype=None, or an optimizer with moments (SGD(momentum=0.9), "
        f"Adam, AdamW...). Received: optimizer of type {kind}")


def check_quantized(optimizer, pairs):
    """After the inner optimizer built: ValueError if it made no quantized slot although it
    updates ``pairs`` (it keeps no moments to quantize)."""
    if pairs and not getattr(optimizer, "_tfinit_quantized_slots", None):
        _no_moments(optimizer)


def install(optimizer, is_master, make_slot, fp32_state):
    """Make ``optimizer`` (this object only) store each slot it makes from a variable for which
    ``is_master(variable)`` holds, named other than ``fp32_state``, as codes and scales: its
    own two variables (what ``optimizer.variables`` lists and files store). The slot it uses
    is ``make_slot(reference, name, codes, scales, levels)``."""
    make = optimizer.add_variable_from_reference
    made = []
    object.__setattr__(optimizer, "_tfinit_quantized_slots", made)

    def add_variable_from_reference(reference_variable, name=None, initializer="zeros"):
        shape = tuple(reference_variable.shape)
        if not is_master(reference_variable) or name in fp32_state or not math.prod(shape):
            return make(reference_variable, name=name, initializer=initializer)
        levels = map_for(name)
        base = f"{reference_variable.path.replace('/', '_')}_{name or 'var'}"
        start = keras.initializers.get(initializer)(shape, dtype=MASTER_DTYPE)
        codes, scales = quantize(ops.convert_to_tensor(start), levels)
        codes_var = optimizer.add_variable(
            shape=tuple(codes.shape), dtype=CODE_DTYPE, name=f"{base}_codes",
            initializer=lambda shape, dtype: codes)
        scales_var = optimizer.add_variable(
            shape=tuple(scales.shape), dtype=MASTER_DTYPE, name=f"{base}_scales",
            initializer=lambda shape, dtype: scales)
        slot = make_slot(reference_variable, base, codes_var, scales_var, levels)
        # its state is its codes and scales: the slot itself is no optimizer variable
        internals.keep_out_of_optimizer_variables(optimizer, slot)
        made.append(slot)
        return slot

    internals.set_object_method(optimizer, "add_variable_from_reference",
                                add_variable_from_reference)
    internals.set_object_method(optimizer, "apply", _in_steps(optimizer.apply, made))


def _in_steps(apply, slots):
    """``apply`` with ``slots`` dequantized once before it and requantized once after it."""

    def apply_on_dequantized(*args, **kwargs):
        for slot in slots:
            slot.open_step()
        try:
            result = apply(*args, **kwargs)
        except BaseException:
            for slot in slots:
                slot.close_step(store=False)
            raise
        for slot in slots:
            slot.close_step()
        return result

    return apply_on_dequantized
