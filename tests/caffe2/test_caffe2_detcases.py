"""Differential test: the detection cases the real Caffe2 1.8.1 ran, against to_keras.

tests/caffe2/data/detcases/ (a copy of the generator's draw, its README says how it was
made) holds 172 cases: single-op draws of the ops Detectron-style nets use, cases Caffe2
rejects, and toy FPN Mask R-CNN nets. As that README's "What the converter must do to
pass" says, each case must:

* ``expect: compare``: convert (``to_keras(predict_net, init_net, input_shape,
  outputs=case["outputs"])``, ``input_shape`` a tuple for one data input, ``{blob:
  shape}`` for several) and, called on Caffe2's own arrays, give every output with
  Caffe2's shape (data-dependent row counts exactly), integers exactly and floats within
  ``1e-4 * max(1, max|y_caffe2|)`` with NaN where Caffe2 has NaN;
* ``expect: refuse``: be refused with a ValueError by ``to_keras``;
* ``expect: refuse_or_run_error``: be refused, or raise when the model runs.

Op types the converter does not convert yet (``PENDING``) must be refused by type, and
``MIN_MATCHING`` is a floor on the cases that match, so that a match cannot silently turn
into a refusal. Each case is converted and run once (cached) and shared by the tests.
"""

import functools
import json
import re

import keras
import numpy as np
import pytest

from conftest import REPO
from tfinit.caffe2 import (
    Caffe2AffineChannel,
    Caffe2Cast,
    Caffe2Gather,
    Caffe2ResizeNearest,
    Caffe2TopK,
    converted_ops,
    to_keras,
)

DATA = REPO / "tests" / "caffe2" / "data" / "detcases"
MANIFEST = json.loads((DATA / "cases.json").read_text())
CASES = {case["name"]: case for case in MANIFEST["cases"]}
TOLERANCE = 1e-4  # the README's: max|y - y_caffe2| <= 1e-4 * max(1, max|y_caffe2|)

# Op types converted by a later merge (the detection ops' layers); a case using one must be
# refused by type until then.
PENDING = {op_type for op_type in ("RoIAlign", "GenerateProposals", "BBoxTransform",
                                   "BoxWithNMSLimit", "CollectAndDistributeFpnRpnProposals")
           if op_type not in converted_ops()}
# The batch-2 net, where Caffe2 misattributes detections and caps the rois of the whole
# batch: checked per image, not against Caffe2's arrays (docs/caffe2-ops.md, "Batches of
# more than one image").
DEVIATIONS = {"e2e_d2_b2"}
# A floor on the cases that match: every `compare` case but the batch-2 net (141).
MIN_MATCHING = 141


def _op_types(case):
    return {op["type"] for op in case["ops"]}


def _input_shape(case):
    shapes = {blob: tuple(case["input_shapes"][blob][1:]) for blob in case["data_inputs"]}
    return shapes[case["data_inputs"][0]] if len(shapes) == 1 else shapes


def _safe(blob):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", blob) or "layer"


@functools.lru_cache(maxsize=None)
def outcome(name):
    """``("refused", message)``, ``("run_error", message)`` or ``("ran", outputs, arrays)``
    for case ``name``: converted once and called on Caffe2's inputs."""
    case = CASES[name]
    try:
        model = to_keras(DATA / f"{name}_predict_net.pb", DATA / f"{name}_init_net.pb",
                         _input_shape(case), outputs=case["outputs"])
    except ValueError as err:
        return ("refused", str(err))
    arrays = np.load(DATA / f"{name}.npz")
    by_name = {_safe(blob): arrays[f"input/{blob}"] for blob in case["data_inputs"]}
    inputs = [by_name[tensor.name] for tensor in model.inputs]
    try:
        got = model(inputs if len(inputs) > 1 else inputs[0])
    except Exception as err:  # noqa: BLE001 - Caffe2 rejected these inputs at run time
        return ("run_error", f"{type(err).__name__}: {err}")
    got = got if isinstance(got, (list, tuple)) else [got]
    return ("ran", [keras.ops.convert_to_numpy(y) for y in got], arrays)


def mismatches(name):
    """What differs between the model's outputs and Caffe2's ([] when every one matches)."""
    case = CASES[name]
    _, got, arrays = outcome(name)
    found = []
    for blob, y in zip(case["outputs"], got, strict=True):
        want = arrays[f"blob/{blob}"]
        if y.shape != want.shape:
            found.append(f"{blob}: shape {y.shape}, Caffe2 {want.shape}")
        elif want.dtype.kind in "iu":
            if not np.array_equal(y, want):
                found.append(f"{blob}: integers differ at {np.argwhere(y != want)[:3].tolist()}")
        elif not np.array_equal(np.isnan(y), np.isnan(want)):
            found.append(f"{blob}: NaN where Caffe2 has {np.isnan(want).sum()} NaN")
        elif want.size:
            finite = ~np.isnan(want)
            scale = max(1.0, float(np.abs(want[finite]).max(initial=0.0)))
            error = float(np.abs(y[finite].astype(np.float64) - want[finite]).max(initial=0.0))
            if error > TOLERANCE * scale:
                found.append(f"{blob}: max error {error:.3g} > {TOLERANCE} * {scale:.3g}")
    return found


def _ids(expect):
    return sorted(name for name, case in CASES.items() if case["expect"] == expect
                  and name not in DEVIATIONS)


def _params(expect):
    """The cases as pytest params, the nets (over 1 s each on 2 cores) marked slow."""
    return [pytest.param(name, marks=pytest.mark.slow) if CASES[name]["kind"] == "net"
            else name for name in _ids(expect)]


def test_the_copy_holds_every_case():
    assert len(CASES) == 172
    assert all((DATA / f"{name}{tail}").is_file() for name in CASES
               for tail in (".npz", "_predict_net.pb", "_init_net.pb"))
    assert not [name for name, case in CASES.items() if case["fragile"]]  # none skipped


@pytest.mark.parametrize("name", _params("compare"))
def test_caffe2_computed_case_matches(name):
    case = CASES[name]
    pending = _op_types(case) & PENDING
    result = outcome(name)
    if pending:  # refused by type, every pending op named
        assert result[0] == "refused", result[:1]
        for op_type in pending:
            assert f"{op_type} (op" in result[1], result[1]
        return
    assert result[0] == "ran", result[1]
    assert mismatches(name) == []


@pytest.mark.parametrize("name", _ids("refuse"))
def test_caffe2_rejected_case_is_refused(name):
    result = outcome(name)
    assert result[0] == "refused", f"converted and {result[0]}: Caffe2 rejects {name}"


@pytest.mark.parametrize("name", _ids("refuse_or_run_error"))
def test_value_dependent_rejection_is_refused_or_raises(name):
    result = outcome(name)
    assert result[0] in ("refused", "run_error"), f"{name} returned an answer"


@pytest.mark.slow  # runs every case (the nets included): about 30 s on 2 cores alone
def test_floor_on_matching_cases():
    matching = [name for name in _ids("compare")
                if not _op_types(CASES[name]) & PENDING and outcome(name)[0] == "ran"
                and not mismatches(name)]
    assert len(matching) >= MIN_MATCHING, len(matching)


def test_docs_status_tables_list_every_converted_op():
    """docs/caffe2-ops.md's tables read from the per-op table: every generic or detection
    op's row holds its ``OpSpec.doc`` and its rows kind; every other op has a row."""
    from tfinit.caffe2._spec import SPECS

    docs = (REPO / "docs" / "caffe2-ops.md").read_text()
    rows = [line for line in docs.splitlines() if line.startswith("| ")]
    for op_type, spec in SPECS.items():
        if spec.family in ("generic", "detection"):
            assert f"| {op_type} | {spec.doc} | {spec.rows} |" in docs, op_type
        else:
            assert any(re.match(rf"\| ([\w ]+, )*{op_type}\b", line) for line in rows), op_type


def test_inspect_names_the_detection_ops_and_data_dependent_rows(capsys):
    from tfinit.caffe2._cli import inspect

    inspect(str(DATA / "e2e_d2_b1_predict_net.pb"))
    printed = capsys.readouterr().out
    assert "detection ops: GenerateProposals (#21, #27: " in printed
    assert "RoIAlign (#29, #30, #47: " in printed
    dynamic = next(line for line in printed.splitlines() if line.startswith("data-dependent"))
    assert "#21 GenerateProposals" in dynamic and "#43 LengthsToSegmentIds" in dynamic
    converts = not PENDING
    assert ("convertible: yes" in printed) == converts


@pytest.mark.slow  # converts and runs the batch-2 net (about 2 s on 2 cores)
@pytest.mark.skipif(bool(PENDING), reason="needs the detection ops")
def test_batch_of_two_selects_each_images_own_best_rois():
    """e2e_d2_b2: Caffe2 1.8.1 keeps the rpn_post_nms_topN best rois of the whole batch,
    interleaved, and reports detections under the wrong image (docs/caffe2-ops.md, "Batches
    of more than one image"). The model's rois are, image by image, the rpn_post_nms_topN
    best of that image's own proposals (Caffe2's GenerateProposals outputs, which are per
    image), best first, as the image alone gives them; its mask rois read its own image."""
    from tfinit.caffe2 import read_netdef

    name = "e2e_d2_b2"
    case, arrays = CASES[name], np.load(DATA / f"{name}.npz")
    outputs = ["rois", "mask_rois", "batch_splits_nms"]
    model = to_keras(DATA / f"{name}_predict_net.pb", DATA / f"{name}_init_net.pb",
                     _input_shape(case), outputs=outputs)
    got = dict(zip(outputs, (keras.ops.convert_to_numpy(y) for y in model(
        [arrays["input/data"], arrays["input/im_info"]])), strict=True))
    collect = next(op for op in read_netdef(DATA / f"{name}_predict_net.pb").ops
                   if op.type == "CollectAndDistributeFpnRpnProposals")
    top = int(collect.args["rpn_post_nms_topN"])
    proposals = np.concatenate([arrays[f"blob/{b}"] for b in collect.inputs[:2]])
    probs = np.concatenate([arrays[f"blob/{b}"] for b in collect.inputs[2:]])
    want = []
    for image in range(2):
        rows = np.flatnonzero(proposals[:, 0] == image)
        best = rows[np.argsort(-probs[rows], kind="stable")][:top]
        want.append(proposals[best])
    want = np.concatenate(want)
    assert len(want) > len(arrays["blob/rois"])  # Caffe2 kept 20 for the batch
    np.testing.assert_allclose(got["rois"], want, rtol=0, atol=1e-4 * np.abs(want).max())
    splits = got["batch_splits_nms"].astype(int)
    image = np.repeat(np.arange(2), splits)
    assert len(image) == len(got["mask_rois"])
    np.testing.assert_array_equal(got["mask_rois"][:, 0], image)  # its masks, its features


@pytest.mark.slow  # converts and runs a 56-op net blob by blob (about 4 s on 2 cores)
@pytest.mark.skipif(bool(PENDING), reason="needs the detection ops")
def test_check_forward_matches_every_blob_of_the_detectron2_net():
    """Every blob Caffe2 wrote (proposals, rois per level, features, detections, masks:
    61 blobs), not only the external outputs, through check_forward."""
    from tfinit.caffe2 import check_forward

    name = "e2e_d2_b1"
    report = check_forward(DATA / f"{name}_predict_net.pb", DATA / f"{name}_init_net.pb",
                           DATA / f"{name}.npz")
    assert report.ok, str(report)
    checked = {check.blob for check in report.blobs}
    assert {"rpn_rois_fpn2", "rois_fpn3", "rois_idx_restore_int32", "pred_bbox",
            "mask_rois", "mask_fcn_probs"} <= checked
    assert len(checked) >= 60


@pytest.mark.slow  # converts a 56-op net, traces it and saves it (about 8 s on 2 cores)
@pytest.mark.skipif(bool(PENDING), reason="needs the detection ops")
def test_detection_model_runs_in_a_tf_function_and_after_a_keras_round_trip(tmp_path):
    import tensorflow as tf

    name = "e2e_d2_b1"
    case, arrays = CASES[name], np.load(DATA / f"{name}.npz")
    model = to_keras(DATA / f"{name}_predict_net.pb", DATA / f"{name}_init_net.pb",
                     _input_shape(case), outputs=case["outputs"])
    inputs = [arrays["input/data"], arrays["input/im_info"]]
    model.save(tmp_path / "mask_rcnn.keras")
    reloaded = keras.saving.load_model(tmp_path / "mask_rcnn.keras")
    for run in (tf.function(model), reloaded):
        for blob, y in zip(case["outputs"], run(inputs), strict=True):
            want = arrays[f"blob/{blob}"]
            assert y.shape == want.shape, blob
            scale = max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(np.asarray(y), want, rtol=0, atol=TOLERANCE * scale)


@pytest.mark.parametrize("layer", [
    lambda: Caffe2TopK(3, 1, flattened=True), lambda: Caffe2Gather(1),
    lambda: Caffe2ResizeNearest([0, 0, 1], [1, 0]), lambda: Caffe2AffineChannel(3, axis=1),
    lambda: Caffe2Cast("int64"),
], ids=["TopK", "Gather", "ResizeNearest", "AffineChannel", "Cast"])
def test_generic_layers_round_trip_their_config(layer):
    original = layer()
    copy = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(original))
    assert type(copy) is type(original)
    assert copy.get_config() == original.get_config()


def _detections(model, data, im_info):
    """The model's outputs on a batch, as NumPy arrays."""
    return [keras.ops.convert_to_numpy(y) for y in model([data, im_info])]


@pytest.mark.slow  # converts the toy Mask R-CNN and runs it three times (about 4 s)
@pytest.mark.skipif(bool(PENDING), reason="needs the detection ops")
def test_net_without_batch_splits_refuses_a_batch_of_several_images():
    """e2e_v1_b1 (the shipped toy Mask R-CNN): its BoxWithNMSLimit has no batch_splits input,
    so Caffe2 treats all rows as one image; a batch of 2 copies of the image gave 12 merged
    detections with no image index. It is refused, eagerly and traced, naming the op and
    what to do; the batch of 1 still gives Caffe2's detections."""
    import tensorflow as tf

    name = "e2e_v1_b1"
    case, arrays = CASES[name], np.load(DATA / f"{name}.npz")
    model = to_keras(DATA / f"{name}_predict_net.pb", DATA / f"{name}_init_net.pb",
                     _input_shape(case), outputs=case["outputs"])
    data, info = arrays["input/data"], arrays["input/im_info"]
    for run in (model, tf.function(model)):
        with pytest.raises(tf.errors.InvalidArgumentError) as refusal:
            run([np.concatenate([data, data]), np.concatenate([info, info])])
        for words in ("BoxWithNMSLimit", "without a `batch_splits` input",
                      "feed batch_splits", "one by one"):
            assert words in str(refusal.value), str(refusal.value)[:600]
    got = _detections(model, data, info)
    assert got[0].shape == arrays["blob/score_nms"].shape == (12,)
    np.testing.assert_allclose(got[1], arrays["blob/bbox_nms"], rtol=0, atol=1e-3)


@pytest.mark.slow  # converts the batch-2 net and runs it five times (about 6 s)
@pytest.mark.skipif(bool(PENDING), reason="needs the detection ops")
def test_batch_gives_each_image_what_it_gives_alone():
    """Metamorphic: e2e_d2 (BoxWithNMSLimit reads batch_splits) on a batch returns, through
    batch_splits_nms, each image's detections and masks exactly as the image alone gives
    them: two copies of one image give its detections twice; [a, b] and [b, a] give a's
    and b's in batch order."""
    name = "e2e_d2_b2"
    case, arrays = CASES[name], np.load(DATA / f"{name}.npz")
    model = to_keras(DATA / f"{name}_predict_net.pb", DATA / f"{name}_init_net.pb",
                     _input_shape(case), outputs=case["outputs"])
    assert case["outputs"][3] == "batch_splits_nms"
    data, info = arrays["input/data"], arrays["input/im_info"]
    alone = [_detections(model, data[i:i + 1], info[i:i + 1]) for i in range(2)]
    assert all(len(a[0]) for a in alone)
    assert not np.allclose(alone[0][0], alone[1][0])  # two images, two sets of detections
    for order in ([0, 0], [0, 1], [1, 0]):
        got = _detections(model, data[order], info[order])
        assert got[3].tolist() == [len(alone[i][0]) for i in order], (order, got[3])
        start = 0
        for i in order:
            count = len(alone[i][0])
            for blob, y, want in zip(case["outputs"], got, alone[i], strict=True):
                if blob == "batch_splits_nms":
                    continue
                scale = max(1.0, float(np.abs(want).max(initial=0.0)))
                np.testing.assert_allclose(y[start:start + count], want, rtol=0,
                                           atol=TOLERANCE * scale, err_msg=f"{order} {blob}")
            start += count
        assert start == len(got[0])


@pytest.mark.skipif(bool(PENDING), reason="needs the detection ops")
def test_huge_roi_align_sampling_grid_is_refused_when_converting():
    """sampling_ratio=1000000 exhausted memory when run; the grid one roi needs is refused
    by to_keras, naming the op, the argument and the limit. The case's own ratio converts."""
    import dataclasses

    from tfinit.caffe2 import read_netdef

    name = next(n for n, c in sorted(CASES.items()) if c["op"] == "RoIAlign"
                and c["expect"] == "compare")
    net = read_netdef(DATA / f"{name}_predict_net.pb")
    op = net.ops[0]
    huge = dataclasses.replace(op, args={**op.args, "sampling_ratio": 1000000})
    with pytest.raises(ValueError, match=r"sampling grid of RoIAlign.*max_bytes"):
        to_keras(dataclasses.replace(net, ops=[huge]), DATA / f"{name}_init_net.pb",
                 _input_shape(CASES[name]))
    to_keras(net, DATA / f"{name}_init_net.pb", _input_shape(CASES[name]))
