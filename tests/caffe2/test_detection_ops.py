"""Caffe2's five detection operators as Keras layers, against what the real Caffe2 1.8.1
computed: every single-op case of ``tests/caffe2/data/detcases`` (copied from the shared
reference, README beside it) for RoIAlign, GenerateProposals, BBoxTransform, BoxWithNMSLimit
and CollectAndDistributeFpnRpnProposals. The layers are called directly (not through
``to_keras``), on Caffe2's own inputs, with the arguments read from the case's NetDef.

Tolerance (the README's): float32 within ``1e-4 * max(1, max|y|)``, integers and row counts
exactly, NaN where Caffe2 has NaN. Cases Caffe2 rejected must be refused by the argument or
shape checks; the ``refuse_or_run_error`` ones (values show why) may instead fail when run.
"""

import json
import pathlib

import keras
import numpy as np
import pytest

from tfinit.caffe2 import read_netdef
from tfinit.caffe2 import _detection_args as A

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf

    from tfinit.caffe2 import _detection as D

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="the detection layers run on TensorFlow only")

DATA = pathlib.Path(__file__).parent / "data" / "detcases"
OPS = ("RoIAlign", "GenerateProposals", "BBoxTransform", "BoxWithNMSLimit",
       "CollectAndDistributeFpnRpnProposals")


def _cases():
    cases = json.loads((DATA / "cases.json").read_text())["cases"]
    return [c for c in cases if c["kind"] == "op" and c["op"] in OPS]


CASES = _cases()
COMPARED = [c for c in CASES if c["caffe2"] == "ok"]
REJECTED = [c for c in CASES if c["caffe2"] != "ok"]


def _nhwc(x):
    return np.transpose(x, (0, 2, 3, 1))


def _static(shape):
    return tuple(shape[1:])


def _apply(layer, *inputs, graph=False):
    """The layer on ``inputs``, eagerly or traced in a ``tf.function`` (the graph a served
    model runs, where TensorFlow's optimizer may rewrite comparisons)."""
    if graph:
        return tf.function(lambda *args: layer(*args))(*inputs)
    return layer(*inputs)


def _roi_align(op, arrays, graph):
    args = A.roi_align_args(op)
    x, rois = (arrays[b] for b in op.inputs)
    A.check_roi_align_shapes(op, _static(x.shape), _static(rois.shape))
    nchw = op.args.get("order", b"NCHW") in (b"NCHW", "NCHW")
    y = _apply(D.Caffe2RoIAlign(**args.layer_kwargs()), _nhwc(x) if nchw else x, rois,
               graph=graph)
    y = np.asarray(y)
    return [np.transpose(y, (0, 3, 1, 2)) if nchw else y]


def _generate_proposals(op, arrays, graph):
    args = A.generate_proposals_args(op)
    scores, deltas, im_info, anchors = (arrays[b] for b in op.inputs)
    A.check_generate_proposals_shapes(op, _static(scores.shape), _static(deltas.shape),
                                      _static(im_info.shape), anchors.shape)
    layer = D.Caffe2GenerateProposals(anchors.tolist(), **args.layer_kwargs())
    return _apply(layer, _nhwc(scores), _nhwc(deltas), im_info, graph=graph)


def _bbox_transform(op, arrays, graph):
    args = A.bbox_transform_args(op)
    rois, deltas, im_info = (arrays[b] for b in op.inputs)
    A.check_bbox_transform_shapes(op, _static(rois.shape), _static(deltas.shape),
                                  _static(im_info.shape))
    layer = D.Caffe2BBoxTransform(**args.layer_kwargs(), num_outputs=len(op.outputs))
    out = _apply(layer, rois, deltas, im_info, graph=graph)
    return out if isinstance(out, list) else [out]


def _box_with_nms_limit(op, arrays, graph):
    args = A.box_with_nms_limit_args(op)
    inputs = [arrays[b] for b in op.inputs]
    A.check_box_with_nms_limit_shapes(op, args, *(_static(v.shape) for v in inputs))
    layer = D.Caffe2BoxWithNMSLimit(**args.layer_kwargs(), num_outputs=len(op.outputs))
    return _apply(layer, *inputs, graph=graph)


def _collect(op, arrays, graph):
    args = A.collect_and_distribute_args(op)
    inputs = [arrays[b] for b in op.inputs]
    half = len(inputs) // 2
    A.check_collect_and_distribute_shapes(op, [_static(v.shape) for v in inputs[:half]],
                                          [_static(v.shape) for v in inputs[half:]])
    layer = D.Caffe2CollectAndDistributeFpnRpnProposals(**args.layer_kwargs())
    return _apply(layer, inputs, graph=graph)


RUN = {"RoIAlign": _roi_align, "GenerateProposals": _generate_proposals,
       "BBoxTransform": _bbox_transform, "BoxWithNMSLimit": _box_with_nms_limit,
       "CollectAndDistributeFpnRpnProposals": _collect}


def _load(case):
    op = read_netdef(DATA / f"{case['name']}_predict_net.pb").ops[0]
    with np.load(DATA / f"{case['name']}.npz") as npz:
        arrays = {k.split("/", 1)[1]: npz[k] for k in npz.files
                  if k.startswith(("input/", "param/"))}
        expected = {k.split("/", 1)[1]: npz[k] for k in npz.files if k.startswith("blob/")}
    return op, arrays, expected


def assert_matches(name, got, want):
    got = np.asarray(got)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != Caffe2's {want.shape}"
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want, err_msg=name)
        return
    got = got.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{name}: NaNs")
    finite = ~np.isnan(want)
    if finite.any():
        bound = 1e-4 * max(1.0, float(np.max(np.abs(want[finite]))))
        err = float(np.max(np.abs(got[finite] - want[finite])))
        assert err <= bound, f"{name}: max |error| {err} > {bound}"


# traced: about 1 s a case on 2 cores (tracing the while loops), hence slow
@pytest.mark.parametrize("graph", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["eager", "graph"])
@pytest.mark.parametrize("case", COMPARED, ids=lambda c: c["name"])
def test_layer_matches_caffe2(case, graph):
    op, arrays, expected = _load(case)
    outputs = RUN[case["op"]](op, arrays, graph)
    assert len(outputs) == len(op.outputs)
    for blob, got in zip(op.outputs, outputs):
        assert_matches(f"{case['name']}:{blob}", got, expected[blob])


@pytest.mark.parametrize("case", REJECTED, ids=lambda c: c["name"])
def test_rejected_case_is_refused(case):
    op, arrays, _ = _load(case)
    if case["expect"] == "refuse":
        with pytest.raises(ValueError, match=case["op"]):
            RUN[case["op"]](op, arrays, False)
    else:  # refuse_or_run_error: only the values show why; an answer fails
        with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
            RUN[case["op"]](op, arrays, False)


def test_every_case_is_covered():
    counts = {}
    for case in CASES:
        counts[case["op"]] = counts.get(case["op"], 0) + 1
    assert counts == {"RoIAlign": 21, "GenerateProposals": 20, "BBoxTransform": 19,
                      "BoxWithNMSLimit": 20, "CollectAndDistributeFpnRpnProposals": 15}
