"""A Caffe2 op's arguments, read as Caffe2 reads them and checked as Caffe2 checks them,
and the one conversion error.

Caffe2 spells a 2-D argument three ways (``kernels``; ``kernel``; ``kernel_h``/``kernel_w``,
in that order of precedence, ``ConvPoolOpBase``) and pads as (top, left, bottom, right).
``legacy_pad=3`` is Caffe's ceil-mode pooling, whose tail pads are computed here. Add/Mul's
``broadcast=1`` places the second input at ``axis`` (or ``axis_str``). docs/caffe2-ops.md
has the rules and their checks against Caffe2.
"""

import math

import numpy as np

NCHW, NHWC = "NCHW", "NHWC"


class Unsupported(ValueError):
    """An op or argument to_keras does not convert (the message completes 'unsupported')."""


def ints(value, name="value", bits=32):
    """Any int or int array argument as a flat list of Python ints (``bits``: the C++
    int size Caffe2 reads it as: 32, or 64 for Reshape's ``shape``).

    Raises:
        ValueError: a float (Caffe2 reads an int argument from the ``i``/``ints`` fields
            only, so ``kernel: f: inf`` or ``2.5`` is a net it refuses).
    """
    array = np.asarray(value)
    if array.dtype.kind not in "iub":
        raise ValueError(f"argument `{name}` must be an int or a list of ints. Received: "
                         f"{name}={_shown(value)}")
    values = [int(v) for v in array.reshape(-1)]
    low, high = -2**(bits - 1), 2**(bits - 1) - 1
    if any(not low <= v <= high for v in values):
        raise ValueError(f"argument `{name}` must hold ints in [{low}, {high}] (Caffe2 reads "
                         f"it as int{bits}). Received: {name}={_shown(value)}")
    return values


_INT32 = (-2**31, 2**31 - 1)  # Caffe2 reads int arguments as C++ int; larger ones are refused


def int_arg(op, name, default):
    """The op's int argument ``name`` (``default`` when absent); a float is refused."""
    value = op.args.get(name, default)
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if not isinstance(value, (int, np.integer)):
        raise ValueError(f"argument `{name}` of {op.type} must be an int. Received: "
                         f"{name}={_shown(value)}")
    if not _INT32[0] <= value <= _INT32[1]:
        raise ValueError(f"argument `{name}` of {op.type} must be an int in [{_INT32[0]}, "
                         f"{_INT32[1]}] (Caffe2 reads it as a C++ int). Received: "
                         f"{name}={value}")
    return int(value)


def _shown(value):
    if isinstance(value, np.ndarray):
        return repr(value.tolist()) if value.size <= 8 else f"an array of {value.size}"
    if isinstance(value, bytes):
        return repr(value.decode(errors="replace"))
    return repr(value)


def spatial_values(op, single, names, plural, default):
    """A 2-D argument as Caffe2's ``ConvPoolOpBase`` reads it.

    The list ``plural`` comes first; ``single``, when given, fills it up to one value per
    axis (it does not replace values ``plural`` gives); else ``names`` (the ``_h/_w`` or
    ``pad_t/pad_l/pad_b/pad_r`` forms) are appended, only when all of them are given;
    nothing given: ``default`` per axis.
    """
    args, size = op.args, len(names)
    values = ints(args[plural], plural) if args.get(plural) is not None else []
    if single in args:
        values = (values + [int_arg(op, single, default)] * size)[:size]
    elif all(n in args for n in names):
        values += [int_arg(op, n, default) for n in names]
    if not values:
        values = [default] * size
    if len(values) != size:
        given = {n: op.args[n] for n in (plural, single, *names) if n in op.args}
        raise ValueError(f"{op.type}'s 2-D `{plural}` must be {size} values; Caffe2 reads "
                         f"{values} from {_args(given)}")
    return tuple(values)


def _args(given):
    return ", ".join(f"{k}={_shown(v)}" for k, v in given.items())


_LEGACY_PAD = {0: "NOTSET", 1: "VALID", 2: "SAME", 3: "CAFFE_LEGACY_POOLING"}
CEIL_MODE = 3  # LegacyPadding::CAFFE_LEGACY_POOLING: Caffe's ceil-mode pooling


def legacy_pad(op):
    """The op's ``legacy_pad``: 0 (none) or, on pooling ops, 3 (Caffe's ceil mode)."""
    value = op.args.get("legacy_pad", 0)
    allowed = (0, CEIL_MODE) if op.type in ("MaxPool", "AveragePool") else (0,)
    if not isinstance(value, int) or value not in allowed:
        name = _LEGACY_PAD.get(value, "unknown") if isinstance(value, int) else "not an int"
        raise Unsupported(f"legacy_pad={value!r} ({name}) on {op.type}; "
                          f"{' and '.join(str(v) for v in allowed)} are converted")
    return value


def window(op):
    """The op's ``(kernel, stride, dilation, pads)`` as Caffe2 reads them (``legacy_pad`` is
    checked too); ``kernel`` is ``(0, 0)`` when no kernel argument is given.

    Raises:
        ValueError: a stride or dilation under 1, a negative kernel or pad, a float.
    """
    kernel = spatial_values(op, "kernel", ("kernel_h", "kernel_w"), "kernels", 0)
    stride = spatial_values(op, "stride", ("stride_h", "stride_w"), "strides", 1)
    dilation = spatial_values(op, "dilation", ("dilation_h", "dilation_w"), "dilations", 1)
    pads = spatial_values(op, "pad", ("pad_t", "pad_l", "pad_b", "pad_r"), "pads", 0)
    legacy_pad(op)
    for name, values, low in (("kernel", kernel, 0), ("stride", stride, 1),
                              ("dilation", dilation, 1), ("pads", pads, 0)):
        if min(values) < low:
            raise ValueError(f"{op.type} needs every {name} value >= {low}. Received: "
                             f"{name}={list(values)} (from {_args(_given(op, name))})")
    return kernel, stride, dilation, pads


def _given(op, name):
    names = {"kernel": ("kernels", "kernel", "kernel_h", "kernel_w"),
             "stride": ("strides", "stride", "stride_h", "stride_w"),
             "dilation": ("dilations", "dilation", "dilation_h", "dilation_w"),
             "pads": ("pads", "pad", "pad_t", "pad_l", "pad_b", "pad_r")}[name]
    return {n: op.args[n] for n in names if n in op.args} or {name: "default"}


def check_kernel_given(op, kernel):
    """Caffe2 refuses a conv or pool without a kernel size (``kernel_[dim] > 0``)."""
    if 0 in kernel:
        raise ValueError(f"{op.type} needs a kernel size of at least 1 per axis, given as "
                         f"`kernel`, `kernel_h` and `kernel_w` or `kernels`. Received: "
                         f"kernel={list(kernel)} (from {_args(_given(op, 'kernel'))})")


def check_pool_pads(op, kernel, pads):
    """Caffe2's pooling: every pad (head and tail) smaller than the kernel on its axis, so
    that no window lies wholly in the padding ("Pad should be smaller than kernel")."""
    for k in range(2):
        if pads[k] >= kernel[k] or pads[k + 2] >= kernel[k]:
            raise ValueError(f"{op.type}'s pads must be smaller than its kernel (Caffe2: "
                             f"'Pad should be smaller than kernel'). Received: "
                             f"kernel={list(kernel)}, pads (t, l, b, r)={list(pads)}")


def check_fits(op, size, kernel, dilation, pads):
    """Caffe2's ``in_size + pad_head + pad_tail >= dilated kernel`` on each spatial axis
    (``size``: the input's ``(H, W)``): at least one output row and column."""
    for k, axis in enumerate("HW"):
        span = dilation[k] * (kernel[k] - 1) + 1
        if size[k] + pads[k] + pads[k + 2] < span:
            raise ValueError(f"{op.type}'s kernel is larger than its padded input on axis "
                             f"{axis}: {size[k]} + pads {pads[k]} + {pads[k + 2]} < "
                             f"{span} (kernel {kernel[k]}, dilation {dilation[k]}). Received: "
                             f"kernel={list(kernel)}, pads (t, l, b, r)={list(pads)}, input "
                             f"(H, W)={tuple(size)}")


def check_global_pooling(op, stride, dilation, pads):
    """Caffe2: ``global_pooling`` takes no stride, pad or dilation."""
    if any(pads) or stride != (1, 1) or dilation != (1, 1):
        raise ValueError(f"{op.type} with global_pooling=1 takes no stride, pad or dilation "
                         f"(Caffe2 refuses them). Received: stride={list(stride)}, "
                         f"pads={list(pads)}, dilation={list(dilation)}")


def ceil_mode_pads(size, kernel, stride, head):
    """Caffe2's ``legacy_pad=3`` on one spatial axis: ``(output size, tail pad)``.

    The size is ``ceil((size + 2 * head - kernel) / stride) + 1``, one less when the last
    window would start in the padding (``head > 0``); the tail pad given is not used, it
    becomes ``head + stride * (that size - the floor rule's size)``. A kernel larger than
    the input gives size 0 (Caffe2's empty output); a negative size is refused.
    """
    span = size + 2 * head - kernel
    out = -(-span // stride) + 1
    if head > 0 and (out - 1) * stride >= size + head:
        out -= 1
    if out < 0:  # 0 is Caffe2's empty output (a kernel larger than the input)
        raise ValueError(f"kernel {kernel} is larger than the padded input "
                         f"({size} + 2 * {head}) by more than the stride {stride}: "
                         f"legacy_pad=3 gives a negative output size {out}")
    if (out - 1) * stride - head >= size:
        raise Unsupported(f"legacy_pad=3 with a last window outside the input (size {size}, "
                          f"kernel {kernel}, stride {stride}, pad {head})")
    return out, head + stride * (out - (span // stride + 1))


def padded_shape(shape, pads):
    """The NHWC ``shape`` with Caffe2's (top, left, bottom, right) ``pads`` added."""
    n, h, w, c = shape
    return (n, h + pads[0] + pads[2], w + pads[1] + pads[3], c)


def same_pads(size, kernel, stride):
    """TensorFlow's SAME padding (before, after) for one spatial dimension."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def legacy_axis(op, rank, b_rank):
    """Where ``broadcast=1`` places B's first dim among A's ``rank`` dims: ``axis``, or
    ``order.find(axis_str)``, or (neither given, or ``axis=-1``) ``rank - b_rank``."""
    axis = int_arg(op, "axis", -1)
    if op.args.get("axis_str") is not None:
        axis_str = op.args["axis_str"]
        axis_str = axis_str.decode(errors="replace") if isinstance(axis_str, bytes) else str(
            axis_str)
        if axis != -1:
            raise ValueError(f"{op.type} takes `axis` or `axis_str`, not both. Received: "
                             f"axis={axis}, axis_str={axis_str!r}")
        order = op.args.get("order", b"NCHW")
        order = order.decode(errors="replace") if isinstance(order, bytes) else str(order)
        axis = order.find(axis_str) if axis_str else -1
        if axis < 0:
            raise ValueError(f"argument `axis_str` of {op.type} must name axes of its order "
                             f"{order!r}. Received: axis_str={axis_str!r}")
    if axis == -1:
        axis = rank - b_rank
    if not 0 <= axis <= rank - b_rank:
        raise ValueError(f"Argument `axis` must be an int in [0, {rank - b_rank}] or -1 for "
                         f"{op.type}'s {rank}-D first input and {b_rank}-D second input "
                         f"(broadcast=1). Received: {_given_axis(op)}")
    return axis


def _given_axis(op):
    shown = [f"{n}={op.args[n]!r}" for n in ("axis", "axis_str") if n in op.args]
    return ", ".join(shown) or "no axis"


def aligned(op, form, shape, rank):
    """``shape`` (the second input's, Caffe2 order) placed among ``rank`` dims: ``(full,
    exact)``: the full shape it broadcasts as (1 where it has no dimension), and the dims
    that must equal A's (``broadcast=1``: from B's first to its last dim that is not 1;
    the 1s at either end of B are broadcast, a 1 between them is not)."""
    shape = list(shape)
    if form == "legacy":
        axis = legacy_axis(op, rank, len(shape))
        inner = [k for k, d in enumerate(shape) if d != 1]
        exact = range(axis + inner[0], axis + inner[-1] + 1) if inner else range(0)
    else:
        axis, exact = rank - len(shape), range(0)
        if axis < 0:
            raise ValueError(f"{op.type}: its second input of shape {tuple(shape)} has more "
                             f"dims than its {rank}-D first input")
    return [1] * axis + shape + [1] * (rank - axis - len(shape)), exact


def misfit(full, exact, shape):
    """The dims (k >= 1) where ``full`` does not broadcast onto ``shape`` as Caffe2 does."""
    return [k for k in range(1, len(shape)) if shape[k] is not None and (
        full[k] != shape[k] if k in exact else full[k] not in (1, shape[k]))]


def op_order(op):
    """The op's ``order`` argument as ``"NCHW"``/``"NHWC"`` (Caffe2's default NCHW)."""
    order = op.args.get("order", b"NCHW")
    order = order.decode() if isinstance(order, bytes) else str(order)
    if order not in (NCHW, NHWC):
        raise Unsupported(f"order {order!r} (NCHW and NHWC are)")
    return order


def fc_weight_2d(op, w, w_blob):
    """The FC weight as Caffe2 uses it: ``[prod(dims[:axis_w]), prod(dims[axis_w:])]``."""
    axis_w = op.args.get("axis_w", 1)
    if not isinstance(axis_w, int) or not -w.ndim <= axis_w < max(w.ndim, 1):
        raise Unsupported(f"FC axis_w={axis_w!r} (weight '{w_blob}' of shape "
                          f"{tuple(w.shape)} takes an int in [-{w.ndim}, {w.ndim}))")
    axis_w %= w.ndim
    return w.reshape(math.prod(w.shape[:axis_w]), math.prod(w.shape[axis_w:]))
