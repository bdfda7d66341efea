"""Caffe2's fan rules on Caffe2 and Keras layouts (docs/caffe2-semantics.md, "Fan conventions")."""

import numpy as np
import pytest

from tfinit import _fans

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it


@pytest.mark.parametrize(
    "caffe2_shape, keras_shape, fan_in, fan_out",
    [
        ((256, 128), (128, 256), 128, 256),  # FC [out, in] vs Dense [in, out]
        ((64, 32, 3, 3), (3, 3, 32, 64), 288, 576),  # OIHW vs HWIO
        ((8, 4, 5), (5, 4, 8), 20, 40),  # conv1d [O, I, k] vs Keras [k, I, O]
    ],
)
def test_same_parameter_same_fans_in_both_layouts(caffe2_shape, keras_shape, fan_in, fan_out):
    assert _fans.xavier_fan_in(caffe2_shape, "caffe2") == fan_in
    assert _fans.xavier_fan_in(keras_shape, "keras") == fan_in
    assert _fans.msra_fan_out(caffe2_shape, "caffe2") == fan_out
    assert _fans.msra_fan_out(keras_shape, "keras") == fan_out


def test_caffe2_literal_3d_rule():
    # docs/caffe2-semantics.md: 3-D [a, b, c] -> fan_in = b*c, fan_out = a*c.
    assert _fans.xavier_fan_in((2, 3, 5), "caffe2") == 15
    assert _fans.msra_fan_out((2, 3, 5), "caffe2") == 10


def test_integer_division_like_caffe2():
    assert _fans.xavier_fan_in((3, 7), "caffe2") == 7
    assert _fans.xavier_fan_in((7,), "keras") == 1  # 1-D: n // n
    assert _fans.xavier_fan_in((7,), "caffe2") == 1


def test_zero_dims_do_not_divide_by_zero():
    assert _fans.xavier_fan_in((0, 4), "caffe2") == 0
    assert _fans.msra_fan_out((4, 0), "caffe2") == 0


def test_errors_name_the_operator():
    with pytest.raises(ValueError, match="XavierFill.*0-d"):
        _fans.xavier_fan_in((), "keras")
    with pytest.raises(ValueError, match="MSRAFill.*at least 2"):
        _fans.msra_fan_out((5,), "keras")
    with pytest.raises(ValueError, match="XavierFill.*layout"):
        _fans.check_layout("nchw", "XavierFill")


def test_layout_helpers():
    assert _fans.caffe2_shape((3, 3, 32, 64)) == (64, 32, 3, 3)
    assert _fans.caffe2_shape((128, 256)) == (256, 128)
    assert _fans.caffe2_shape((9,)) == (9,)
    oihw = np.arange(64 * 32 * 3 * 2).reshape(64, 32, 3, 2)
    np.testing.assert_array_equal(_fans.to_keras_layout(oihw), oihw.transpose(2, 3, 1, 0))
