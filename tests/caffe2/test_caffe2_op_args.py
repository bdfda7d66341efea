"""How a Caffe2 op's arguments are read (tfinit/caffe2/_op_args.py): Caffe2's own rules,
written in docs/caffe2-ops.md, each pinned by a case the real Caffe2 ran (ids of
tests/data/caffe2_opcases/, checked end to end by tests/caffe2/test_caffe2_opcases.py)."""

import numpy as np
import pytest

from tfinit.caffe2 import NetDef, Operator
from tfinit.caffe2._op_args import aligned, int_arg, ints, legacy_axis, window


def _op(args, op_type="MaxPool"):
    return Operator(op_type, ("x",), ("y",), args)


@pytest.mark.parametrize("args, kernel, stride, pads", [
    # 452: `kernel` beats kernel_h/kernel_w (Caffe2's output was 1x1 of a 2x2 pool)
    ({"kernel": 2, "stride": 2, "kernel_h": 1, "kernel_w": 1}, (2, 2), (2, 2), (0, 0, 0, 0)),
    # 479: `stride` beats stride_h/stride_w
    ({"kernel": 1, "stride": 2, "stride_h": 1, "stride_w": 1}, (1, 1), (2, 2), (0, 0, 0, 0)),
    # 454: pad_t alone is no padding (all four or none)
    ({"kernel": 2, "stride": 2, "pad_t": 1}, (2, 2), (2, 2), (0, 0, 0, 0)),
    ({"kernel": 2, "pad_t": 1, "pad_l": 2, "pad_b": 3, "pad_r": 0}, (2, 2), (1, 1), (1, 2, 3, 0)),
    # 457: `pad` beats pad_t
    ({"kernel": 2, "pad": 1, "pad_t": 0}, (2, 2), (1, 1), (1, 1, 1, 1)),
    # the list beats the single value: `kernel` only fills `kernels` up to 2 values
    ({"kernels": [3, 4], "kernel": 5}, (3, 4), (1, 1), (0, 0, 0, 0)),
    ({"kernels": [3], "kernel": 5}, (3, 5), (1, 1), (0, 0, 0, 0)),
    ({"kernel_h": 3, "kernel_w": 1, "strides": [2, 1]}, (3, 1), (2, 1), (0, 0, 0, 0)),
    ({"kernel_h": 3}, (0, 0), (1, 1), (0, 0, 0, 0)),  # kernel_w missing: no kernel given
])
def test_2d_arguments_are_read_with_caffe2s_precedence(args, kernel, stride, pads):
    assert window(_op(args)) == (kernel, stride, (1, 1), pads)


@pytest.mark.parametrize("args, text", [
    ({"kernel": float("inf")}, "argument `kernel` of MaxPool must be an int. Received: "
                               "kernel=inf"),
    ({"kernel": 2.0}, "Received: kernel=2.0"),
    ({"kernels": np.array([2.5, 1.0], np.float32)}, "argument `kernels` must be an int or a "
                                                    "list of ints. Received: kernels=[2.5, 1.0]"),
    ({"kernel": 2, "stride": 0}, "needs every stride value >= 1. Received: stride=[0, 0]"),
    ({"kernel": 2, "pad": -1}, "needs every pads value >= 0"),
    ({"kernels": [1, 1], "kernel_h": 1, "kernel_w": 1}, "2-D `kernels` must be 2 values; "
                                                        "Caffe2 reads [1, 1, 1, 1]"),
])
def test_bad_2d_arguments_are_refused_naming_them(args, text):
    with pytest.raises(ValueError) as info:
        window(_op(args))
    assert text in str(info.value)


def test_int_arguments_refuse_floats():
    assert int_arg(_op({"group": 3}), "group", 1) == 3
    assert int_arg(_op({}), "group", 1) == 1
    with pytest.raises(ValueError, match=r"argument `group` of MaxPool must be an int\. "
                                         r"Received: group=nan"):
        int_arg(_op({"group": float("nan")}), "group", 1)
    assert ints(np.array([1, 2], np.int64)) == [1, 2]


@pytest.mark.parametrize("args, a_rank, b_shape, full, exact", [
    # 445: B [2, 1] on A [N, 2, 2]: at A.ndim - B.ndim = 1, its trailing 1 keeps its place
    ({"broadcast": 1}, 3, (2, 1), [1, 2, 1], [1]),
    # 447: B [1, 2, 1, 1] on a 4-D A: the leading and trailing 1s are broadcast
    ({"broadcast": 1}, 4, (1, 2, 1, 1), [1, 2, 1, 1], [1]),
    ({"broadcast": 1, "axis": 1}, 4, (3, 4), [1, 3, 4, 1], [1, 2]),
    # 449: axis_str "C" of order NCHW is axis 1; 450: "H" of NHWC is axis 1 too
    ({"broadcast": 1, "axis_str": "C", "order": "NCHW"}, 4, (2,), [1, 2, 1, 1], [1]),
    ({"broadcast": 1, "axis_str": "H", "order": "NHWC"}, 4, (3,), [1, 3, 1, 1], [1]),
    ({"broadcast": 1, "axis": -1}, 4, (5,), [1, 1, 1, 5], [3]),
    # 451: a 1 between B's dims must match A's dim exactly
    ({"broadcast": 1, "axis": 1}, 4, (2, 1, 2), [1, 2, 1, 2], [1, 2, 3]),
    ({}, 4, (3, 1), [1, 1, 3, 1], []),  # numpy rule: aligned from the right, 1s stretch
])
def test_legacy_broadcast_places_b_as_caffe2_does(args, a_rank, b_shape, full, exact):
    op = Operator("Mul", ("a", "b"), ("y",), args)
    placed, must_match = aligned(op, "legacy" if args.get("broadcast") else "numpy", b_shape,
                                 a_rank)
    assert placed == full and list(must_match) == exact


@pytest.mark.parametrize("args, text", [
    ({"broadcast": 1, "axis": 2}, r"Argument `axis` must be an int in \[0, 1\] or -1 for "
                                  r"Add's 4-D first input and 3-D second input"),
    ({"broadcast": 1, "axis": 1, "axis_str": "C"}, "takes `axis` or `axis_str`, not both"),
    ({"broadcast": 1, "axis_str": "X"}, "must name axes of its order 'NCHW'"),
])
def test_bad_legacy_axes_are_refused(args, text):
    with pytest.raises(ValueError, match=text):
        legacy_axis(Operator("Add", ("a", "b"), ("y",), args), 4, 3)


@pytest.mark.tensorflow_only
def test_a_non_finite_int_argument_in_a_file_is_a_valueerror_naming_the_op():
    """Issue 31 row 11: ``kernel: f: inf`` in a predict net's bytes was a raw OverflowError."""
    from tfinit.caffe2 import to_keras

    net = NetDef(ops=[Operator("Relu", ("data",), ("r",)),
                      Operator("MaxPool", ("r",), ("y",), {"kernel": float("inf")})],
                 external_output=["y"])
    with pytest.raises(ValueError, match=r"to_keras: op #1 MaxPool -> \['y'\]: argument "
                                         r"`kernel` of MaxPool must be an int\. Received: "
                                         r"kernel=inf"):
        to_keras(net.to_bytes(), {}, (1, 4, 4))


def test_int_arguments_outside_a_cpp_int_are_refused():
    """Caffe2 reads int arguments as C++ int: 2**62 (a mutated file) is refused, not passed
    on to a TensorFlow kernel that fails on it."""
    with pytest.raises(ValueError, match=r"argument `stride` of MaxPool must be an int in "
                                         r"\[-2147483648, 2147483647\]"):
        window(_op({"kernel": 2, "stride": 2**62}))
    with pytest.raises(ValueError, match=r"argument `strides` must hold ints in"):
        window(_op({"kernel": 2, "strides": np.array([2**62, 1], np.int64)}))
    assert ints(np.array([2**40], np.int64), "shape", bits=64) == [2**40]
