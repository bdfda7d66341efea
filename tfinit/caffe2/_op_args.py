"""A Caffe2 conv or pooling op's arguments, read for conversion, and the one conversion error.

Caffe2 spells a 2-D argument three ways (``kernel``; ``kernel_h``/``kernel_w``;
``kernels``) and pads as (top, left, bottom, right). ``legacy_pad=3`` is Caffe's ceil-mode
pooling, whose tail pads are computed here (docs/caffe2-ops.md has the rule and its checks
against Caffe2).
"""

import math

import numpy as np


class Unsupported(ValueError):
    """An op or argument to_keras does not convert (the message completes 'unsupported')."""


def ints(value):
    """Any int or int array argument as a flat list of Python ints."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def spatial_values(op, single, names, plural, default):
    """A 2-D argument given as ``plural``, as ``names`` or as ``single``, Caffe2's order."""
    args = op.args
    if args.get(plural) is not None:
        values = ints(args[plural])
    elif any(n in args for n in names):
        values = [int(args.get(n, default)) for n in names]
    elif single in args:
        values = [int(args[single])] * len(names)
    else:
        values = [default] * len(names)
    if len(values) != len(names):
        raise Unsupported(f"argument {plural}={values} (2-D ops take {len(names)} values)")
    return tuple(values)


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


def window(op, kernel=None):
    """The op's ``(kernel, stride, dilation, pads)``; ``legacy_pad`` is checked too."""
    if kernel is None:
        kernel = spatial_values(op, "kernel", ("kernel_h", "kernel_w"), "kernels", 0)
    stride = spatial_values(op, "stride", ("stride_h", "stride_w"), "strides", 1)
    dilation = spatial_values(op, "dilation", ("dilation_h", "dilation_w"), "dilations", 1)
    pads = spatial_values(op, "pad", ("pad_t", "pad_l", "pad_b", "pad_r"), "pads", 0)
    legacy_pad(op)
    return kernel, stride, dilation, pads


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
