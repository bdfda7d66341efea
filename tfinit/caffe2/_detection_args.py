"""The arguments and input shapes of Caffe2's five detection operators, read and checked as
Caffe2 1.8.1 reads and checks them.

One reader per op (``roi_align_args``, ``generate_proposals_args``, ``bbox_transform_args``,
``box_with_nms_limit_args``, ``collect_and_distribute_args``) returns a small frozen record
whose ``layer_kwargs()`` are the keyword arguments of the matching Keras layer of
``tfinit/caffe2/_detection.py``; one shape check per op (``check_*_shapes``) takes the static
per-example input shapes (Caffe2's first axis dropped, ``None`` for an unknown size) and
refuses what Caffe2 rejects by shape.

What Caffe2 reads (``GetSingleArgument<T>``): a float argument only from the ``f`` field (an
int given, ``spatial_scale=1``, is "Argument ... does not have the right field"), an int or
bool only from ``i``, a string from ``s``; ``weights`` from ``floats`` (ints leave it empty,
and its size check fails). Arguments an op's schema does not know (``correct_transform_coords``
in 1.8.1) are not read at all, so any value passes. The rotated-box arguments
(``angle_bound_*``, ``clip_angle_thresh``) are read, so their types are checked, but only
matter for 5-column boxes, which are refused. Every refusal is a ``ValueError`` naming the
op type, the argument and the value; ``to_keras`` adds the op's index.

What the shared cases need: RoIAlign with ``aligned`` 0/1, adaptive and fixed sampling, 4- and
5-column rois, NCHW or NHWC ``order``; GenerateProposals with ``correct_transform_coords``
present (ignored) and every combination of top-N, ``nms_thresh``, ``min_size`` and
``legacy_plus_one``; BBoxTransform with 1 or 2 outputs and ``rotated=0``; BoxWithNMSLimit
with 3 or 6 outputs, 2 or 3 inputs, soft-NMS, ``cls_agnostic_bbox_reg`` and both
``*_include_bg_cls``; CollectAndDistributeFpnRpnProposals with any level ranges.
"""

import dataclasses
import math

from tfinit.caffe2._op_args import _shown

_INT32 = (-2**31, 2**31 - 1)


def _where(op):
    return f"{op.type}"


def _float(op, name, default):
    value = op.args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, float):
        raise ValueError(f"Argument `{name}` of {_where(op)} must be a float (Caffe2 reads it "
                         f"from the `f` field only: 'Argument {name} does not have the right "
                         f"field'). Received: {name}={_shown(value)}")
    if not math.isfinite(value):
        raise ValueError(f"Argument `{name}` of {_where(op)} must be a finite float (Caffe2 "
                         f"would compute with NaN or inf). Received: {name}={value}")
    return float(value)


def _int(op, name, default):
    value = op.args.get(name, default)
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"Argument `{name}` of {_where(op)} must be an int (Caffe2 reads it "
                         f"from the `i` field only). Received: {name}={_shown(value)}")
    if not _INT32[0] <= value <= _INT32[1]:
        raise ValueError(f"Argument `{name}` of {_where(op)} must be an int in "
                         f"[{_INT32[0]}, {_INT32[1]}] (Caffe2 reads a C++ int). "
                         f"Received: {name}={value}")
    return value


def _bool(op, name, default):
    return bool(_int(op, name, int(default)))


def _string(op, name, default):
    value = op.args.get(name, default)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if not isinstance(value, str):
        raise ValueError(f"Argument `{name}` of {_where(op)} must be a string. Received: "
                         f"{name}={_shown(value)}")
    return value


def _rotated_args(op, bound_on=True):
    """Read (for their types) the rotated-box arguments Caffe2's constructor reads."""
    if bound_on:
        _bool(op, "angle_bound_on", True)
    _int(op, "angle_bound_lo", -90)
    _int(op, "angle_bound_hi", 90)
    _float(op, "clip_angle_thresh", 1.0)


def _refuse_rotated(op):
    if _bool(op, "rotated", False):
        raise ValueError(f"Argument `rotated` of {_where(op)}: rotated boxes (5 columns, "
                         f"angles) are not converted. Received: rotated=1")


def _io_count(op, inputs, outputs):
    if len(op.inputs) not in inputs:
        raise ValueError(f"{_where(op)} takes {' or '.join(map(str, inputs))} inputs (Caffe2's "
                         f"schema). Received: {len(op.inputs)} inputs {list(op.inputs)}")
    if len(op.outputs) not in outputs:
        raise ValueError(f"{_where(op)} writes {' or '.join(map(str, outputs))} outputs "
                         f"(Caffe2's schema). Received: {len(op.outputs)} outputs "
                         f"{list(op.outputs)}")


class _Args:
    def layer_kwargs(self):
        """The keyword arguments of the op's Keras layer (``tfinit/caffe2/_detection.py``)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RoIAlignArgs(_Args):
    spatial_scale: float
    pooled_h: int
    pooled_w: int
    sampling_ratio: int
    aligned: bool


def roi_align_args(op):
    """RoIAlign's arguments: ``spatial_scale`` (float, 1.0), ``pooled_h``/``pooled_w`` (int,
    1), ``sampling_ratio`` (int, -1; <= 0 is adaptive), ``aligned`` (bool, 0), ``order``
    (NCHW or NHWC: the layout of Caffe2's X; the converted layer takes NHWC either way).

    Raises:
        ValueError: a float argument given as an int, a pooled size under 1 (Caffe2 writes an
            empty output), a ``spatial_scale`` that is not positive, another ``order``.
    """
    _io_count(op, (2,), (1,))
    args = RoIAlignArgs(_float(op, "spatial_scale", 1.0), _int(op, "pooled_h", 1),
                        _int(op, "pooled_w", 1), _int(op, "sampling_ratio", -1),
                        _bool(op, "aligned", False))
    order = _string(op, "order", "NCHW")
    if order not in ("NCHW", "NHWC"):
        raise ValueError(f"Argument `order` of {_where(op)} must be 'NCHW' or 'NHWC'. "
                         f"Received: order={order!r}")
    for name in ("pooled_h", "pooled_w"):
        if getattr(args, name) < 1:
            raise ValueError(f"Argument `{name}` of {_where(op)} must be at least 1 (Caffe2 "
                             f"writes an empty or undefined output). Received: "
                             f"{name}={getattr(args, name)}")
    if not args.spatial_scale > 0 or not math.isfinite(args.spatial_scale):
        raise ValueError(f"Argument `spatial_scale` of {_where(op)} must be a positive finite "
                         f"float. Received: spatial_scale={args.spatial_scale}")
    return args


def _dims(shape, what, op, rank):
    shape = tuple(shape)
    if len(shape) != rank:
        raise ValueError(f"{_where(op)}'s input `{what}` must have rank {rank + 1} (per "
                         f"example: {rank}). Received: per-example shape {shape}")
    return shape


def check_roi_align_shapes(op, x_shape, rois_shape):
    """RoIAlign: X is 4-D (per example 3-D, any layout), rois ``[R, 4 or 5]``.

    Raises:
        ValueError: what Caffe2 enforces (``X.dim() == 4``; ``roi_cols == 4 || 5``).
    """
    _dims(x_shape, "X", op, 3)
    (cols,) = _dims(rois_shape, "rois", op, 1)
    if cols is not None and cols not in (4, 5):
        raise ValueError(f"{_where(op)}'s rois must have 4 or 5 columns ([batch index,] x1, "
                         f"y1, x2, y2). Received: {cols} columns")


@dataclasses.dataclass(frozen=True)
class GenerateProposalsArgs(_Args):
    spatial_scale: float
    pre_nms_top_n: int
    post_nms_top_n: int
    nms_thresh: float
    min_size: float
    legacy_plus_one: bool


def generate_proposals_args(op):
    """GenerateProposals' arguments: ``spatial_scale`` (float, 1/16), ``pre_nms_topN`` (int,
    6000), ``post_nms_topN`` (int, 300), ``nms_thresh`` (float, 0.7), ``min_size`` (float,
    16), ``legacy_plus_one`` (bool, 1); the rotated-box arguments are read for their types;
    ``correct_transform_coords`` is not read by Caffe2 1.8.1.

    Raises:
        ValueError: a float argument given as an int (``min_size=4``) or not finite, a
            ``spatial_scale`` that is not positive, ``nms_thresh`` outside ``[0, 1]``.
    """
    _io_count(op, (4,), (2,))
    args = GenerateProposalsArgs(
        _float(op, "spatial_scale", 1.0 / 16.0), _int(op, "pre_nms_topN", 6000),
        _int(op, "post_nms_topN", 300), _float(op, "nms_thresh", 0.7),
        _float(op, "min_size", 16.0), _bool(op, "legacy_plus_one", True))
    _rotated_args(op)
    if not args.spatial_scale > 0 or not math.isfinite(args.spatial_scale):
        raise ValueError(f"Argument `spatial_scale` of {_where(op)} must be a positive finite "
                         f"float. Received: spatial_scale={args.spatial_scale}")
    if not 0.0 <= args.nms_thresh <= 1.0:
        raise ValueError(f"Argument `nms_thresh` of {_where(op)} must be in [0, 1] (an IoU "
                         f"threshold; TensorFlow's NMS takes no other). Received: "
                         f"nms_thresh={args.nms_thresh}")
    return args


def check_generate_proposals_shapes(op, scores_shape, deltas_shape, im_info_shape,
                                    anchors_shape):
    """GenerateProposals: scores ``[N, A, H, W]``, deltas ``[N, 4A, H, W]`` (per example, in
    Caffe2's NCHW order), im_info ``[N, 3]``, anchors ``[A, 4]`` (the whole blob).

    Raises:
        ValueError: deltas' channels not ``4 * A``, ``H``/``W`` differing, im_info not 3
            columns, anchors not ``[A, 4]`` (Caffe2's enforces).
    """
    a, h, w = _dims(scores_shape, "scores", op, 3)
    d, dh, dw = _dims(deltas_shape, "bbox_deltas", op, 3)
    (info,) = _dims(im_info_shape, "im_info", op, 1)
    if a is not None and d is not None and d != 4 * a:
        raise ValueError(f"{_where(op)}'s bbox_deltas must have 4 * A channels for the A={a} "
                         f"of scores. Received: {d} channels")
    for what, s, t in (("height", h, dh), ("width", w, dw)):
        if None not in (s, t) and s != t:
            raise ValueError(f"{_where(op)}'s scores and bbox_deltas differ in {what}: "
                             f"{s} vs {t}")
    if info is not None and info != 3:
        raise ValueError(f"{_where(op)}'s im_info must have 3 columns (height, width, scale)."
                         f" Received: {info} columns")
    anchors_shape = tuple(anchors_shape)
    if len(anchors_shape) != 2 or anchors_shape[1] != 4 or (
            a is not None and anchors_shape[0] != a):
        raise ValueError(f"{_where(op)}'s anchors must be [A, 4] with A={a} (the scores' "
                         f"channels); 5-column rotated anchors are not converted. Received: "
                         f"anchors of shape {anchors_shape}")


@dataclasses.dataclass(frozen=True)
class BBoxTransformArgs(_Args):
    weights: tuple
    apply_scale: bool
    legacy_plus_one: bool


def bbox_transform_args(op):
    """BBoxTransform's arguments: ``weights`` (4 floats, [1, 1, 1, 1]), ``apply_scale`` (bool,
    1), ``legacy_plus_one`` (bool, 1); ``rotated`` must be 0; ``correct_transform_coords`` is
    not read by Caffe2 1.8.1 (accepted, ignored).

    Raises:
        ValueError: ``weights`` not 4 finite, non-zero floats, ``rotated=1``, a mistyped
            argument.
    """
    _io_count(op, (3,), (1, 2))
    weights = op.args.get("weights", (1.0, 1.0, 1.0, 1.0))
    floats = getattr(weights, "dtype", None)
    if floats is None:
        ok = all(isinstance(v, float) for v in weights)
    else:
        ok = floats.kind == "f"
    if not ok or len(weights) != 4:
        raise ValueError(f"Argument `weights` of {_where(op)} must be 4 floats [wx, wy, ww, "
                         f"wh] (Caffe2: 'weights size must be 4'). Received: "
                         f"weights={_shown(weights)}")
    if not all(math.isfinite(v) and v != 0 for v in map(float, weights)):
        raise ValueError(f"Argument `weights` of {_where(op)} must be finite and non-zero (the "
                         f"deltas are divided by them: Caffe2 would give inf or NaN boxes). "
                         f"Received: weights={_shown(weights)}")
    _refuse_rotated(op)
    _rotated_args(op)
    return BBoxTransformArgs(tuple(float(v) for v in weights), _bool(op, "apply_scale", True),
                             _bool(op, "legacy_plus_one", True))


def check_bbox_transform_shapes(op, rois_shape, deltas_shape, im_info_shape):
    """BBoxTransform: rois ``[R, 4 or 5]``, deltas ``[R, 4K]``, im_info ``[N, 3]``.

    Raises:
        ValueError: deltas' columns not a multiple of 4, rois not 4 or 5 columns, im_info not
            3 columns.
    """
    (cols,) = _dims(rois_shape, "rois", op, 1)
    (d,) = _dims(deltas_shape, "deltas", op, 1)
    (info,) = _dims(im_info_shape, "im_info", op, 1)
    if cols is not None and cols not in (4, 5):
        raise ValueError(f"{_where(op)}'s rois must have 4 or 5 columns. Received: {cols}")
    if d is not None and (d % 4 or d == 0):
        raise ValueError(f"{_where(op)}'s deltas must have 4 columns per class (a positive "
                         f"multiple of 4). Received: {d} columns")
    if info is not None and info != 3:
        raise ValueError(f"{_where(op)}'s im_info must have 3 columns (height, width, scale)."
                         f" Received: {info} columns")


@dataclasses.dataclass(frozen=True)
class BoxWithNMSLimitArgs(_Args):
    score_thresh: float
    nms: float
    detections_per_im: int
    soft_nms_method: str  # "none" (hard NMS), "linear" or "gaussian"
    soft_nms_sigma: float
    soft_nms_min_score_thres: float
    cls_agnostic_bbox_reg: bool
    input_boxes_include_bg_cls: bool
    output_classes_include_bg_cls: bool
    legacy_plus_one: bool


def box_with_nms_limit_args(op):
    """BoxWithNMSLimit's arguments: ``score_thresh`` (float, 0.05), ``nms`` (float, 0.3),
    ``detections_per_im`` (int, 100), ``soft_nms_enabled`` (bool, 0), ``soft_nms_method``
    ("linear" or "gaussian", checked even when soft-NMS is off), ``soft_nms_sigma`` (float,
    0.5), ``soft_nms_min_score_thres`` (float, 0.001), ``cls_agnostic_bbox_reg``,
    ``input_boxes_include_bg_cls`` (1), ``output_classes_include_bg_cls`` (1),
    ``legacy_plus_one`` (1); ``rotated`` must be 0.

    Raises:
        ValueError: another ``soft_nms_method`` (Caffe2: "Unexpected soft_nms_method"),
            ``rotated=1``, a mistyped argument.
    """
    _io_count(op, (2, 3), (3, 4, 5, 6))
    if len(op.outputs) == 5:
        raise ValueError(f"{_where(op)} with 5 outputs: Caffe2 writes `keeps` and "
                         f"`keeps_size` together (6 outputs); 5 is not converted")
    method = _string(op, "soft_nms_method", "linear")
    if method not in ("linear", "gaussian"):
        raise ValueError(f"Argument `soft_nms_method` of {_where(op)} must be 'linear' or "
                         f"'gaussian' (Caffe2: 'Unexpected soft_nms_method'). Received: "
                         f"soft_nms_method={method!r}")
    enabled = _bool(op, "soft_nms_enabled", False)
    _refuse_rotated(op)
    return BoxWithNMSLimitArgs(
        _float(op, "score_thresh", 0.05), _float(op, "nms", 0.3),
        _int(op, "detections_per_im", 100), method if enabled else "none",
        _float(op, "soft_nms_sigma", 0.5), _float(op, "soft_nms_min_score_thres", 0.001),
        _bool(op, "cls_agnostic_bbox_reg", False),
        _bool(op, "input_boxes_include_bg_cls", True),
        _bool(op, "output_classes_include_bg_cls", True), _bool(op, "legacy_plus_one", True))


def check_box_with_nms_limit_shapes(op, args, scores_shape, boxes_shape,
                                    batch_splits_shape=None):
    """BoxWithNMSLimit: scores ``[R, K]``, boxes ``[R, 4 * box classes]`` (box classes: 1 with
    ``cls_agnostic_bbox_reg``, ``K - 1`` without the background's boxes, else ``K``),
    batch_splits ``[N]``.

    Raises:
        ValueError: what Caffe2 enforces (``num_boxes_classes * 4 == boxes.size(1)``, 2-D
            scores and boxes, 1-D batch_splits).
    """
    (k,) = _dims(scores_shape, "scores", op, 1)
    (b,) = _dims(boxes_shape, "boxes", op, 1)
    if batch_splits_shape is not None:
        _dims(batch_splits_shape, "batch_splits", op, 0)
    if k is None or b is None:
        raise ValueError(f"{_where(op)} needs static class counts: scores {k} and boxes {b} "
                         f"columns")
    if k < 1:
        raise ValueError(f"{_where(op)}'s scores need at least 1 column. Received: {k}")
    classes = 1 if args.cls_agnostic_bbox_reg else (
        k - 1 if not args.input_boxes_include_bg_cls else k)
    if classes * 4 != b:
        raise ValueError(f"{_where(op)}'s boxes must have {classes} x 4 = {classes * 4} columns"
                         f" for {k} score columns (cls_agnostic_bbox_reg="
                         f"{int(args.cls_agnostic_bbox_reg)}, input_boxes_include_bg_cls="
                         f"{int(args.input_boxes_include_bg_cls)}). Received: {b} columns")


@dataclasses.dataclass(frozen=True)
class CollectAndDistributeArgs(_Args):
    roi_canonical_scale: int
    roi_canonical_level: int
    roi_min_level: int
    roi_max_level: int
    rpn_min_level: int
    rpn_max_level: int
    rpn_post_nms_top_n: int
    legacy_plus_one: bool


def collect_and_distribute_args(op):
    """CollectAndDistributeFpnRpnProposals' arguments: ``roi_canonical_scale`` (int, 224),
    ``roi_canonical_level`` (int, 4), ``roi_min_level``/``roi_max_level`` (2/5),
    ``rpn_min_level``/``rpn_max_level`` (2/6), ``rpn_post_nms_topN`` (int, 2000),
    ``legacy_plus_one`` (1). The inputs are the rpn levels' rois then their scores
    (``2 * rpn levels``); the outputs ``rois``, one per roi level, ``rois_idx_restore``.

    Raises:
        ValueError: a level range that is empty, an input or output count that does not fit
            the levels (Caffe2's enforces), a mistyped argument.
    """
    args = CollectAndDistributeArgs(
        _int(op, "roi_canonical_scale", 224), _int(op, "roi_canonical_level", 4),
        _int(op, "roi_min_level", 2), _int(op, "roi_max_level", 5),
        _int(op, "rpn_min_level", 2), _int(op, "rpn_max_level", 6),
        _int(op, "rpn_post_nms_topN", 2000), _bool(op, "legacy_plus_one", True))
    for low, high in (("roi_min_level", "roi_max_level"), ("rpn_min_level", "rpn_max_level")):
        if getattr(args, low) > getattr(args, high):
            raise ValueError(f"{_where(op)}: `{low}` must not exceed `{high}`. Received: "
                             f"{low}={getattr(args, low)}, {high}={getattr(args, high)}")
    if args.rpn_post_nms_top_n < 1:
        raise ValueError(f"Argument `rpn_post_nms_topN` of {_where(op)} must be at least 1 "
                         f"(Caffe2 keeps that many rois). Received: "
                         f"rpn_post_nms_topN={args.rpn_post_nms_top_n}")
    if args.roi_canonical_scale <= 0:
        raise ValueError(f"Argument `roi_canonical_scale` of {_where(op)} must be positive. "
                         f"Received: roi_canonical_scale={args.roi_canonical_scale}")
    rpn = args.rpn_max_level - args.rpn_min_level + 1
    roi = args.roi_max_level - args.roi_min_level + 1
    if len(op.inputs) != 2 * rpn:
        raise ValueError(f"{_where(op)} takes 2 x {rpn} inputs (rois and scores of rpn levels "
                         f"{args.rpn_min_level}-{args.rpn_max_level}; Caffe2: 'InputSize() == "
                         f"2 * num_rpn_lvls'). Received: {len(op.inputs)} inputs")
    if len(op.outputs) != roi + 2:
        raise ValueError(f"{_where(op)} writes {roi} + 2 outputs (rois, one per roi level "
                         f"{args.roi_min_level}-{args.roi_max_level}, rois_idx_restore; "
                         f"Caffe2: 'OutputSize() == num_roi_lvls + 2'). Received: "
                         f"{len(op.outputs)} outputs")
    return args


def check_collect_and_distribute_shapes(op, rois_shapes, scores_shapes):
    """CollectAndDistributeFpnRpnProposals: each rpn level's rois ``[R_l, 5]`` and scores
    ``[R_l]``.

    Raises:
        ValueError: rois without 5 columns (Caffe2 reads them as 5 columns, past their end
            for 4), scores not 1-D.
    """
    for k, shape in enumerate(rois_shapes):
        (cols,) = _dims(shape, f"rois of rpn level #{k}", op, 1)
        if cols != 5:
            raise ValueError(f"{_where(op)}'s rpn rois must have 5 columns (batch index, x1, "
                             f"y1, x2, y2); Caffe2 reads 5 whatever they have. Received: "
                             f"{cols} columns for input '{op.inputs[k]}'")
    for k, shape in enumerate(scores_shapes):
        _dims(shape, f"scores of rpn level #{k}", op, 0)
