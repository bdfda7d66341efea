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


def _traced(cases):
    """The cases also run traced in a ``tf.function`` (about 1 s a case on 2 cores, tracing
    the while loops): every fixed case (each pins one rule: empty rois, zero-area rois, NaN,
    soft-NMS, legacy_plus_one, ...), the random draws whose NMS takes the zero-area path
    (021, 025: the graph optimizer once folded its NaN comparison), and each op's first two
    random draws."""
    draws = {}
    for case in cases:
        if case["name"].endswith("_rand"):
            draws.setdefault(case["op"], []).append(case["name"])
    first_draws = {name for names in draws.values() for name in names[:2]}
    return [c for c in cases if not c["name"].endswith("_rand") or c["name"] in first_draws
            or c["name"][:3] in ("021", "025")]


TRACED = _traced(COMPARED)


@pytest.mark.parametrize("case", COMPARED, ids=lambda c: c["name"])
def test_layer_matches_caffe2(case):
    _check_case(case, graph=False)


@pytest.mark.slow
@pytest.mark.parametrize("case", TRACED, ids=lambda c: c["name"])
def test_layer_matches_caffe2_in_a_tf_function(case):
    _check_case(case, graph=True)


def _check_case(case, graph):
    op, arrays, expected = _load(case)
    outputs = RUN[case["op"]](op, arrays, graph)
    assert len(outputs) == len(op.outputs)
    for blob, got in zip(op.outputs, outputs, strict=True):
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


EXTRA = pathlib.Path(__file__).parent / "data" / "detcases_extra"


def test_group_by_image_gives_caffe2s_per_image_answer():
    """At batch 2, Collect's ``group_by_image`` gives each image's own best rois in image
    order (what the image alone gives), and BBoxTransform and BoxWithNMSLimit on rois
    grouped by image equal what Caffe2 computed on Caffe2's rois regrouped
    (detcases_extra/make_grouped_b2.py), where no detection is reported under another
    image, against 13 of 30 in Caffe2's own run."""
    ops = {op.type: op for op in read_netdef(DATA / "e2e_d2_b2_predict_net.pb").ops}
    with np.load(EXTRA / "e2e_d2_b2_grouped.npz") as npz:
        blobs = {k.split("/", 1)[1]: npz[k] for k in npz.files}
    with np.load(DATA / "e2e_d2_b2.npz") as npz:
        caffe2_order = {k.split("/", 1)[1]: npz[k] for k in npz.files}
    collect = ops["CollectAndDistributeFpnRpnProposals"]
    inputs = [blobs[b] for b in collect.inputs]
    kwargs = A.collect_and_distribute_args(collect).layer_kwargs()
    grouped = D.Caffe2CollectAndDistributeFpnRpnProposals(**kwargs, group_by_image=True)(inputs)
    # grouped: each image's block is what Collect gives on that image alone (its own top N)
    alone = []
    for image in range(2):
        rows = [v[:, 0] == image for v in inputs[:2]]
        alone.append(D.Caffe2CollectAndDistributeFpnRpnProposals(**kwargs)(
            [v[r] for v, r in zip(inputs, rows + rows, strict=True)])[0].numpy())
    np.testing.assert_allclose(grouped[0].numpy(), np.concatenate(alone), rtol=0, atol=1e-4)
    assert len(grouped[0]) == 2 * kwargs["rpn_post_nms_top_n"] > len(blobs["rois"])
    as_caffe2 = D.Caffe2CollectAndDistributeFpnRpnProposals(**kwargs)(inputs)
    for blob, got in zip(collect.outputs, as_caffe2, strict=True):
        assert_matches(blob, got, caffe2_order[blob])
    assert not np.array_equal(blobs["rois"], caffe2_order["rois"])  # the images interleave

    for op_type in ("BBoxTransform", "BoxWithNMSLimit"):
        op = ops[op_type]
        outputs = RUN[op_type](op, blobs, False)
        for blob, got in zip(op.outputs, outputs, strict=True):
            assert_matches(f"{op_type}:{blob}", got, blobs[blob])
    splits = blobs["batch_splits_nms"].astype(int)
    assert splits.tolist() == [16, 24]
    # every detection's roi (keeps: rows within its image's block) is of its own image
    roi_splits = blobs["roi_batch_splits"].astype(int)
    firsts = np.cumsum(roi_splits) - roi_splits
    image = np.repeat(np.arange(2), splits)
    rows = firsts[image] + blobs["keeps_nms"]
    np.testing.assert_array_equal(blobs["rois"][rows, 0], image)


def test_layers_round_trip_their_config():
    layers = [
        D.Caffe2RoIAlign(0.25, 3, 2, 0, True, name="roi"),
        D.Caffe2GenerateProposals([[-8.0, -8.0, 8.0, 8.0]], 0.125, 40, 12, 0.6, 3.0, False),
        D.Caffe2BBoxTransform((10.0, 10.0, 5.0, 5.0), False, True, 2),
        D.Caffe2BoxWithNMSLimit(0.05, 0.4, 7, "gaussian", 0.3, 0.01, True, False, False,
                                False, 6),
        D.Caffe2CollectAndDistributeFpnRpnProposals(16, 3, 2, 3, 2, 3, 20, False, True)]
    for layer in layers:
        config = layer.get_config()
        again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert type(again) is type(layer)
        assert again.get_config() == config
        assert keras.saving.get_registered_name(type(layer)) == f"tfinit>{type(layer).__name__}"


def test_functional_model_with_free_first_axes_saves_and_loads(tmp_path):
    """RoIAlign and BBoxTransform in a Keras functional model whose inputs have different
    first axes (X: images, rois: boxes); the .keras file gives the same answers."""
    case = next(c for c in COMPARED if c["name"] == "017_RoIAlign_rois4col")
    op, arrays, expected = _load(case)
    x_in, rois_in = keras.Input((8, 8, 3)), keras.Input((4,))
    y = D.Caffe2RoIAlign(**A.roi_align_args(op).layer_kwargs())(x_in, rois_in)
    model = keras.Model([x_in, rois_in], y)
    path = tmp_path / "roi.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    feed = [_nhwc(arrays["X"]), arrays["rois"]]
    for m in (model, loaded):
        assert_matches("Y", np.transpose(np.asarray(m(feed)), (0, 3, 1, 2)), expected["Y"])


@pytest.mark.parametrize("name, value, message", [
    ("spatial_scale", 2, "must be a float"),
    ("pooled_h", 2.0, "must be an int"),
    ("pooled_w", 0, "at least 1"),
    ("order", "CHWN", "'NCHW' or 'NHWC'"),
])
def test_roi_align_argument_refusals_name_op_argument_and_value(name, value, message):
    from tfinit.caffe2 import Operator

    op = Operator("RoIAlign", ("X", "rois"), ("Y",), {name: value})
    with pytest.raises(ValueError, match=message) as err:
        A.roi_align_args(op)
    assert "RoIAlign" in str(err.value) and name in str(err.value)


def test_argument_refusals_of_the_other_ops():
    from tfinit.caffe2 import Operator

    with pytest.raises(ValueError, match="`nms_thresh` of GenerateProposals must be a float"):
        A.generate_proposals_args(Operator("GenerateProposals", ("s", "d", "i", "a"),
                                           ("r", "p"), {"nms_thresh": 1}))
    with pytest.raises(ValueError, match="rotated"):
        A.bbox_transform_args(Operator("BBoxTransform", ("r", "d", "i"), ("b",),
                                       {"rotated": 1}))
    with pytest.raises(ValueError, match="`weights` of BBoxTransform must be 4 floats"):
        A.bbox_transform_args(Operator("BBoxTransform", ("r", "d", "i"), ("b",),
                                       {"weights": np.array([1, 1, 1, 1])}))
    with pytest.raises(ValueError, match="`detections_per_im` of BoxWithNMSLimit"):
        A.box_with_nms_limit_args(Operator("BoxWithNMSLimit", ("s", "b"), ("s", "b", "c"),
                                           {"detections_per_im": 5.0}))
    with pytest.raises(ValueError, match="`rpn_post_nms_topN` of Collect"):
        A.collect_and_distribute_args(Operator(
            "CollectAndDistributeFpnRpnProposals", ("a", "b", "c", "d"), ("r", "x", "y", "i"),
            {"rpn_min_level": 2, "rpn_max_level": 3, "roi_min_level": 2, "roi_max_level": 3,
             "rpn_post_nms_topN": 0}))
    with pytest.raises(ValueError, match="must not exceed"):
        A.collect_and_distribute_args(Operator(
            "CollectAndDistributeFpnRpnProposals", ("a", "b"), ("r", "x", "i"),
            {"roi_min_level": 3, "roi_max_level": 2}))
    # correct_transform_coords is not read by Caffe2 1.8.1: any value passes
    args = A.bbox_transform_args(Operator("BBoxTransform", ("r", "d", "i"), ("b",),
                                          {"correct_transform_coords": 1}))
    assert args.layer_kwargs() == {"weights": (1.0, 1.0, 1.0, 1.0), "apply_scale": True,
                                   "legacy_plus_one": True}


def test_runtime_refusals():
    x = np.zeros((1, 4, 4, 1), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="batch index"):
        D.Caffe2RoIAlign()(x, np.array([[1, 0, 0, 2, 2]], np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="non-negative size"):
        D.Caffe2RoIAlign(aligned=True)(x, np.array([[0, 2, 0, 1, 2]], np.float32))
    rois = np.array([[0, 1, 1, 3, 3], [0, 3, 1, 1, 3]], np.float32)  # width -1: area -3
    layer = D.Caffe2GenerateProposals([[0, 0, 3, 3]], spatial_scale=0.25)
    with pytest.raises(tf.errors.InvalidArgumentError, match="one row per image"):
        layer(np.zeros((2, 2, 2, 1), np.float32), np.zeros((2, 2, 2, 4), np.float32),
              np.array([[8, 8, 1]], np.float32))
    with pytest.raises(ValueError, match="with 1 anchors takes scores"):
        layer(np.zeros((1, 2, 2, 2), np.float32), np.zeros((1, 2, 2, 8), np.float32),
              np.array([[8, 8, 1]], np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="negative area"):
        D.Caffe2CollectAndDistributeFpnRpnProposals(rpn_min_level=2, rpn_max_level=2)(
            [rois, np.array([0.5, 0.4], np.float32)])


def test_layer_examples_run():
    """The layers are not public names of tfinit.caffe2 (tests/test_docs.py runs those), so
    their docstring examples run here."""
    import doctest

    from tfinit.caffe2 import _box_with_nms_limit

    layers = [D.Caffe2RoIAlign, D.Caffe2BBoxTransform, D.Caffe2GenerateProposals,
              _box_with_nms_limit.Caffe2BoxWithNMSLimit,
              D.Caffe2CollectAndDistributeFpnRpnProposals]
    assert D.Caffe2BoxWithNMSLimit is _box_with_nms_limit.Caffe2BoxWithNMSLimit
    for layer in layers:
        failures = []
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        for test in doctest.DocTestFinder(recurse=False).find(layer, layer.__name__, globs={}):
            runner.run(test, out=failures.append)
        result = runner.summarize(verbose=False)
        assert result.attempted >= 4 and result.failed == 0, "".join(failures)


@pytest.mark.slow  # a fresh interpreter importing Keras on JAX: several seconds
def test_jax_backend_is_refused_at_construction():
    import os
    import subprocess
    import sys

    code = ("from tfinit.caffe2 import _detection as D\n"
            "try:\n    D.Caffe2GenerateProposals([[0, 0, 1, 1]])\n"
            "except ValueError as err:\n    print(err)\n")
    env = dict(os.environ, KERAS_BACKEND="jax")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert "needs Keras's TensorFlow backend" in out.stdout, out.stderr[-2000:]
    assert "'jax'" in out.stdout


def _refused(call, *words, graph=False):
    """``call()`` (traced in a tf.function with ``graph``, as ``predict`` runs it) raises
    InvalidArgumentError naming every one of ``words``."""
    run = tf.function(call) if graph else call
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        run()
    for word in words:
        assert word in str(info.value), (word, str(info.value)[:600])


def _f(*rows):
    return np.array(rows, np.float32)


_COLLECT = dict(roi_canonical_scale=32, roi_canonical_level=3, roi_min_level=2,
                roi_max_level=3, rpn_min_level=2, rpn_max_level=3)
_IM = _f([20, 20, 1])


def _pairings():
    """Mismatched pairs each op relies on: (call, the words its refusal must hold)."""
    rois = _f([0, 0, 0, 9, 9])
    return {
        "bbox_rois_deltas": (lambda: D.Caffe2BBoxTransform()(rois, np.zeros((3, 4), "f"), _IM),
                             ("BBoxTransform", "`rois` and `deltas`", "same number of rows")),
        "bbox_batch_index": (lambda: D.Caffe2BBoxTransform()(_f([1, 0, 0, 9, 9]),
                                                             np.zeros((1, 4), "f"), _IM),
                             ("BBoxTransform", "batch index", "im_info")),
        "bbox_4_columns_two_images": (
            lambda: D.Caffe2BBoxTransform()(_f([0, 0, 9, 9]), np.zeros((1, 4), "f"),
                                            _f([20, 20, 1], [20, 20, 1])),
            ("BBoxTransform", "4-column rois take one image")),
        "collect_rois_scores": (
            lambda: D.Caffe2CollectAndDistributeFpnRpnProposals(**_COLLECT)(
                [_f([0, 0, 0, 9, 9], [0, 0, 0, 99, 99]), _f([0, 0, 0, 31, 31]), _f(0.9),
                 _f(0.7)]),
            ("CollectAndDistributeFpnRpnProposals", "`rois of rpn level 2` and `scores of rpn "
             "level 2`", "same number of rows")),
        "nms_scores_boxes": (
            lambda: D.Caffe2BoxWithNMSLimit()(np.full((3, 2), 0.5, "f"), np.zeros((2, 8), "f")),
            ("BoxWithNMSLimit", "`scores` and `boxes`", "same number of rows")),
        "nms_negative_splits": (
            lambda: D.Caffe2BoxWithNMSLimit()(np.full((2, 2), 0.5, "f"), np.zeros((2, 8), "f"),
                                              _f(3, -1)),
            ("BoxWithNMSLimit", "`batch_splits`", "non-negative")),
        "nms_splits_sum": (
            lambda: D.Caffe2BoxWithNMSLimit()(np.full((2, 2), 0.5, "f"), np.zeros((2, 8), "f"),
                                              _f(1, 2)),
            ("BoxWithNMSLimit", "batch_splits must sum")),
        "nms_several_images_without_splits": (
            lambda: D.Caffe2BoxWithNMSLimit()(np.full((2, 2), 0.5, "f"), np.zeros((2, 8), "f"),
                                              images=_f([20, 20, 1], [20, 20, 1])),
            ("BoxWithNMSLimit", "without a `batch_splits` input", "run the images one by one")),
        "proposals_scores_deltas": (
            lambda: D.Caffe2GenerateProposals([[0, 0, 3, 3]], spatial_scale=0.25)(
                np.zeros((1, 2, 2, 1), "f"), np.zeros((1, 3, 2, 4), "f"), _IM),
            ("GenerateProposals", "`scores` and `bbox_deltas`")),
        "proposals_im_info_rows": (
            lambda: D.Caffe2GenerateProposals([[0, 0, 3, 3]], spatial_scale=0.25)(
                np.zeros((2, 2, 2, 1), "f"), np.zeros((2, 2, 2, 4), "f"), _IM),
            ("GenerateProposals", "`scores` and `im_info`", "one row per image")),
        "roi_align_batch_index": (
            lambda: D.Caffe2RoIAlign()(np.zeros((1, 4, 4, 1), "f"), _f([1, 0, 0, 2, 2])),
            ("RoIAlign", "batch index")),
    }


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("pairing", sorted(_pairings()))
def test_every_pairing_is_checked_when_run(pairing, graph):
    """Rows that do not pair are refused naming the op, the inputs and the rule: never a
    broadcast (BBoxTransform gave 3 boxes for 1 roi) nor a mispairing (Collect gave 3 rois
    for 2 + 1 with 2 scores), nor a raw GatherV2/StridedSlice error."""
    call, words = _pairings()[pairing]
    _refused(call, *words, graph=graph)


def _non_finite():
    rois, deltas = _f([0, 0, 0, 9, 9]), np.zeros((1, 4), "f")
    nan = np.float32("nan")
    return {
        "roi_align_rois": (lambda: D.Caffe2RoIAlign()(np.zeros((1, 4, 4, 1), "f"),
                                                      _f([0, 0, 0, np.inf, 2])), "rois"),
        "bbox_rois": (lambda: D.Caffe2BBoxTransform()(_f([0, nan, 0, 9, 9]), deltas, _IM),
                      "rois"),
        "bbox_deltas": (lambda: D.Caffe2BBoxTransform()(rois, _f([0, 0, nan, 0]), _IM),
                        "deltas"),
        "proposals_scores": (lambda: D.Caffe2GenerateProposals([[0, 0, 3, 3]], 0.25)(
            np.full((1, 2, 2, 1), nan, "f"), np.zeros((1, 2, 2, 4), "f"), _IM), "scores"),
        "proposals_deltas": (lambda: D.Caffe2GenerateProposals([[0, 0, 3, 3]], 0.25)(
            np.ones((1, 2, 2, 1), "f"), np.full((1, 2, 2, 4), -np.inf, "f"), _IM),
            "bbox_deltas"),
        "nms_scores": (lambda: D.Caffe2BoxWithNMSLimit()(_f([0.1, nan]), np.zeros((1, 8), "f")),
                       "scores"),
        "nms_boxes": (lambda: D.Caffe2BoxWithNMSLimit()(_f([0.1, 0.9]), np.full((1, 8), nan, "f")),
                      "boxes"),
        "collect_scores": (lambda: D.Caffe2CollectAndDistributeFpnRpnProposals(**_COLLECT)(
            [rois, rois, _f(nan), _f(0.5)]), "scores of rpn level 2"),
    }


@pytest.mark.parametrize("case", sorted(_non_finite()))
def test_non_finite_rois_boxes_deltas_and_scores_are_refused(case):
    """A NaN or inf where the ops select and rank (rois, boxes, deltas, scores) is refused,
    naming the op and the input: never clean-looking detections from a NaN image."""
    call, name = _non_finite()[case]
    _refused(call, f"input `{name}` holds NaN or inf")


@pytest.mark.parametrize("column", [0, 1, 2])
def test_im_info_of_zero_is_refused(column):
    """A zero height, width or scale: BBoxTransform gave NaN boxes, GenerateProposals an
    empty answer, both without a word."""
    info = _f([20, 20, 1])
    info[0, column] = 0
    _refused(lambda: D.Caffe2BBoxTransform()(_f([0, 0, 0, 9, 9]), np.zeros((1, 4), "f"),
                                              info), "BBoxTransform", "`im_info`", "positive")
    _refused(lambda: D.Caffe2GenerateProposals([[0, 0, 3, 3]], 0.25)(
        np.ones((1, 2, 2, 1), "f"), np.zeros((1, 2, 2, 4), "f"), info),
        "GenerateProposals", "`im_info`", "positive")


def test_roi_align_refuses_a_non_finite_feature_map():
    """X overflowed upstream (found by detfuzz: conv weights x 1e6 gave NaN masks from a
    finite image): refused naming RoIAlign and X, eagerly and traced."""
    x = np.zeros((1, 8, 8, 1), np.float32)
    x[0, 2, 2, 0] = np.inf
    for graph in (False, True):
        _refused(lambda: D.Caffe2RoIAlign(pooled_h=2, pooled_w=2, sampling_ratio=1)(
            x, _f([0, 0, 0, 7, 7])), "RoIAlign", "input `X` holds NaN or inf", graph=graph)


def test_roi_align_adaptive_grid_is_bounded():
    """Adaptive sampling takes ceil(roi / pooled) points per bin: a roi of 1e30 would ask
    for more than memory holds. Up to pooled x (H + 2) cells runs, past it is refused."""
    x = np.ones((1, 4, 4, 1), np.float32)
    ok = D.Caffe2RoIAlign(pooled_h=2, pooled_w=2)(x, _f([0, 0, 0, 12, 12])).numpy()
    assert ok.shape == (1, 2, 2, 1) and np.isfinite(ok).all()
    for graph in (False, True):
        _refused(lambda: D.Caffe2RoIAlign(pooled_h=2, pooled_w=2)(x, _f([0, 0, 0, 1e30, 2])),
                 "RoIAlign", "adaptive", "clip the rois", graph=graph)


def test_thresholds_and_float_arguments_in_range():
    from tfinit.caffe2 import Operator

    def proposals(value):
        return A.generate_proposals_args(Operator(
            "GenerateProposals", ("s", "d", "i", "a"), ("r", "p"), {"nms_thresh": value}))

    assert proposals(0.0).nms_thresh == 0.0 and proposals(1.0).nms_thresh == 1.0
    for value in (1.5, -0.1):
        with pytest.raises(ValueError, match=r"`nms_thresh` of GenerateProposals must be in "
                                             r"\[0, 1\]"):
            proposals(value)
    with pytest.raises(ValueError, match="`score_thresh` of BoxWithNMSLimit must be a finite"):
        A.box_with_nms_limit_args(Operator("BoxWithNMSLimit", ("s", "b"), ("s", "b", "c"),
                                           {"score_thresh": float("nan")}))


def test_bbox_transform_weights_must_divide():
    from tfinit.caffe2 import Operator

    for weights in ([10.0, 0.0, 5.0, 5.0], [10.0, float("inf"), 5.0, 5.0]):
        with pytest.raises(ValueError, match="`weights` of BBoxTransform must be finite and "
                                             "non-zero"):
            A.bbox_transform_args(Operator("BBoxTransform", ("r", "d", "i"), ("b",),
                                           {"weights": weights}))


@pytest.mark.parametrize("group_by_image", [False, True])
def test_collect_of_no_proposals_gives_no_rois(group_by_image):
    """Found by tests/caffe2/detfuzz.py: no proposals on any level (an image whose boxes all
    fall out) gave UnsortedSegmentMin's raw error with group_by_image."""
    layer = D.Caffe2CollectAndDistributeFpnRpnProposals(**_COLLECT, group_by_image=group_by_image)
    none = np.zeros((0, 5), np.float32)
    rois, fpn2, fpn3, restore = layer([none, none, np.zeros(0, "f"), np.zeros(0, "f")])
    assert rois.shape == (0, 5) and fpn2.shape == fpn3.shape == (0, 5) and restore.shape == (0,)


@pytest.mark.slow  # 48 eager NMS pairs (about 4 s)
def test_greedy_nms_blocks_keep_what_the_loop_keeps():
    """greedy_nms's per-class IoU blocks (Cluster-NMS's fixed point) keep exactly the boxes
    its loop over kept boxes keeps: random classes, ties, empty boxes (a NaN IoU
    suppresses), masked candidates, thresholds 0 to 1 and per-class limits."""
    import tensorflow as tf

    from tfinit.caffe2._detection_boxes import greedy_nms

    rng = np.random.default_rng(7)
    kept_total = 0
    for trial in range(24):
        num_classes, k = int(rng.integers(1, 5)), int(rng.integers(0, 50))
        classes = tf.constant(np.sort(rng.integers(0, num_classes, k)).astype(np.int32))
        corner = rng.uniform(0, 20, (k, 2))
        size = rng.choice([0.0, 1.0, 3.0, 8.0], (k, 2)) * rng.uniform(0, 1, (k, 2))
        boxes = np.concatenate([corner, corner + size], 1)
        boxes = tf.constant((np.round(boxes) if trial % 2 else boxes).astype(np.float32))
        alive = tf.constant(rng.uniform(size=k) < 0.9)
        for plus_one in (False, True):
            thresh, limit = float(rng.choice([0.0, 0.3, 0.5, 1.0])), [None, 1, 3][trial % 3]
            args = (tf, boxes, alive, classes, num_classes, thresh, plus_one, limit)
            blocks = greedy_nms(*args).numpy()
            loop = greedy_nms(*args, block_limit=-1).numpy()
            np.testing.assert_array_equal(blocks, loop)
            kept_total += int(blocks.sum())
    assert kept_total > 60  # the cases keep boxes, not only empty sets
