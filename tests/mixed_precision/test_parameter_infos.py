"""``tfinit.parameter_infos(model)`` reports each weight's master/copy pair on every backend.

Caffe2's ``model.param_info`` lists a ``ParameterInfo`` per parameter, a PseudoFP16
parameter's with its ``blob_copy``. The record for a weight built in a scope carries the same
``blob_copy`` as ``mp.parameter_info``; a weight without a pair (BatchNormalization's, kept in
fp32) gets ``blob_copy=None``.
"""

import keras
import pytest

import tfinit
from tfinit import mixed_precision as mp

pytestmark = pytest.mark.backend_neutral  # TensorFlow, JAX (CI's JAX pass), torch

SPECS = [("pseudo_fp16", "float16", "fp32"), ("pseudo_fp16", "bfloat16", "fp32"),
         ("reverse", "float16", "fp32"), ("reverse", "bfloat16", "fp32")]
if keras.backend.backend() in ("tensorflow", "jax"):  # where master="split" runs
    SPECS.append(("pseudo_fp16", "bfloat16", "split"))


@pytest.mark.parametrize("mode,compute_dtype,master", SPECS)
def test_parameter_infos_reports_the_pair_of_every_paired_weight(mode, compute_dtype, master):
    with mp.scope(mode, compute_dtype, master=master):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
                                  keras.layers.BatchNormalization()])

    infos = tfinit.parameter_infos(model)

    assert [i.param for i in infos] == list(model.trainable_weights)
    assert [i.param_id for i in infos] == [0, 1, 2, 3]
    assert [i.tags for i in infos] == [("WEIGHT",), ("BIAS",), ("WEIGHT",), ("BIAS",)]
    dense = model.layers[0]
    for info, weight in zip(infos[:2], (dense.kernel, dense.bias), strict=True):
        pair = mp.parameter_info(weight)
        assert info.blob_copy, f"{weight.path}: the pair is missing from parameter_infos"
        assert list(info.blob_copy) == list(pair.blob_copy)
        for dtype, other in pair.blob_copy.items():
            assert info.blob_copy[dtype] is other
        assert info.name == pair.name
    assert infos[2].blob_copy is None and infos[3].blob_copy is None  # BN stays fp32


def test_parameter_infos_leaves_the_pairs_own_record_as_it_was():
    with mp.scope("pseudo_fp16", "float16"):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    pair = mp.parameter_info(model.layers[0].bias)
    before = (pair.param_id, pair.tags)

    infos = tfinit.parameter_infos(model)

    assert infos[1].param_id == 1 and infos[1].tags == ("BIAS",)
    assert (pair.param_id, pair.tags) == before
