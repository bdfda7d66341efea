"""tfinit.parameter_info: the record of one created parameter (Caffe2's ParameterInfo)."""


import pytest
import tensorflow as tf

from tfinit import ParameterInfo


def test_fields_caffe2_code_reads():
    p = tf.Variable(tf.zeros([3, 4], tf.float16), name="fc_w")
    master = tf.Variable(tf.zeros([3, 4]), name="fc_w_fp32")
    info = ParameterInfo(p, [3, 4], blob_copy={"float32": master})
    assert info.name == "fc_w" and str(info) == "fc_w"
    assert info.blob is p and info.param is p and info.dtype == tf.float16
    assert info.shape == (3, 4) and info.size == 12 and info.length == 1
    assert info.param_id is None and info.key is None and info.grad is None
    assert list(info.blob_copy) == [tf.float32]  # keys normalized to tf.DType
    assert info.blob_copy[tf.float32] is master
    assert info.variables == [p, master]
    assert "blob_copy={'float32': 'fc_w_fp32'}" in repr(info)


def test_variables_without_copies_and_scalar_shape():
    v = tf.Variable(1.0, name="s")
    info = ParameterInfo(v, [])
    assert info.variables == [v] and info.shape == () and info.size == 1


def test_bad_blob_copy():
    v = tf.Variable(1.0, name="s")
    with pytest.raises(TypeError, match="'s': Argument `blob_copy` must be a dict"):
        ParameterInfo(v, [], blob_copy=[v])
    with pytest.raises(TypeError, match="'s': blob_copy keys must be dtypes"):
        ParameterInfo(v, [], blob_copy={object(): v})
