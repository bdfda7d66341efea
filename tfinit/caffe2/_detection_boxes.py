"""The box arithmetic and NMS of Caffe2's detection operators, in TensorFlow ops, and the
base of their Keras layers (``tfinit/caffe2/_detection.py``).

``bbox_transform``, ``clip_boxes``, the IoU and the two NMS loops compute what Caffe2 1.8.1's
``utils`` (``generate_proposals_op_util_boxes.h``, ``..._nms.h``) compute, in the same float32
order of operations; ``legacy_plus_one`` is Detectron's ``+1`` in widths and areas.
"""

import math

import keras
import numpy as np

from tfinit import _backend

# Caffe2's utils::BBOX_XFORM_CLIP_DEFAULT, log(1000 / 16) in double, read as float
BBOX_XFORM_CLIP = float(np.float32(math.log(1000.0 / 16.0)))


FEATURE = "tfinit.caffe2's detection layers"


def _check_backend(layer):
    if _backend.name() != "tensorflow":
        raise ValueError(f"{type(layer).__name__} needs Keras's TensorFlow backend: its outputs "
                         f"have data-dependent row counts (proposals, detections), which the "
                         f"static shapes of the {_backend.name()!r} backend cannot hold. Set "
                         f"KERAS_BACKEND=tensorflow to convert detection nets.")


def f32(tf, value):
    return tf.constant(np.float32(value))


def require(tf, condition, message):
    """A run-time check (``InvalidArgumentError`` with ``message``) that every element of
    ``condition`` holds; ``message`` names the op, its inputs and the rule."""
    holds = tf.reduce_all(condition)
    if tf.executing_eagerly():  # the message alone, not Assert's "Expected ... to be true"
        if not bool(holds):
            raise tf.errors.InvalidArgumentError(None, None, message)
        return None
    # Assert with string data only: no tf.cond guard, which TensorFlow's loop optimizer
    # warns about when its output gates a loop
    return tf.debugging.Assert(holds, [message])


def same_rows(tf, op, first, a, second, b, rule):
    """Check that inputs ``first`` (``a``) and ``second`` (``b``) have as many rows."""
    return require(tf, tf.equal(tf.shape(a)[0], tf.shape(b)[0]),
                   f"{op}: inputs `{first}` and `{second}` must have the same number of rows "
                   f"({rule}); a different count would pair rows wrongly")


def finite(tf, op, name, x):
    """Check that input ``name`` holds no NaN or inf: the detection ops select and rank by
    value, and would silently drop or misplace a non-finite row (or pool it into masks)."""
    return require(tf, tf.math.is_finite(x),
                   f"{op}: input `{name}` holds NaN or inf; detection ops refuse non-finite "
                   f"feature maps, rois, boxes, deltas, scores and im_info (a NaN would "
                   f"silently drop or misplace detections, or fill their masks)")


def image_info(tf, op, im_info):
    """Check im_info ``[N, 3]``: every height, width and scale positive and finite."""
    return require(tf, tf.math.is_finite(im_info) & (im_info > 0.0),
                   f"{op}: input `im_info` must hold a positive, finite height, width and scale"
                   f" in every row (a zero scale or size would give NaN boxes or no proposals"
                   f" without a word)")


def per_image(tf, count, fn, specs):
    """Run ``fn(i)`` for each image ``i < count`` and concatenate each of its outputs along
    axis 0 (``specs``: ``(dtype, element shape)`` of each output)."""
    arrays = [tf.TensorArray(dtype, size=count, infer_shape=False, element_shape=shape)
              for dtype, shape in specs]

    def body(i, *arrays):
        return (i + 1, *[a.write(i, v) for a, v in zip(arrays, fn(i), strict=True)])

    _, *arrays = tf.while_loop(lambda i, *_: i < count, body, (tf.constant(0), *arrays))
    outs = []
    for (dtype, shape), array in zip(specs, arrays, strict=True):
        empty = tf.zeros([0, *shape[1:]], dtype)
        outs.append(tf.cond(count > 0, lambda a=array: a.concat(), lambda e=empty: e))
    return outs


def bbox_transform(tf, boxes, deltas, weights, plus_one):
    """Caffe2's ``utils::bbox_transform`` (upright boxes): ``boxes`` ``[R, 4]`` moved by
    ``deltas`` ``[R, 4]``; widths are ``x2 - x1 + plus_one``, dw/dh are capped at
    ``BBOX_XFORM_CLIP`` before ``exp``, and ``plus_one`` is taken off x2/y2."""
    one = f32(tf, float(plus_one))
    half = f32(tf, 0.5)
    x1, y1, x2, y2 = tf.unstack(boxes, 4, axis=1)
    widths = x2 - x1 + one
    heights = y2 - y1 + one
    ctr_x = x1 + half * widths
    ctr_y = y1 + half * heights
    dx, dy, dw, dh = tf.unstack(deltas, 4, axis=1)
    wx, wy, ww, wh = (f32(tf, w) for w in weights)
    clip = f32(tf, BBOX_XFORM_CLIP)
    dx, dy = dx / wx, dy / wy
    dw, dh = tf.minimum(dw / ww, clip), tf.minimum(dh / wh, clip)
    pred_ctr_x = dx * widths + ctr_x
    pred_ctr_y = dy * heights + ctr_y
    pred_w = tf.exp(dw) * widths
    pred_h = tf.exp(dh) * heights
    return tf.stack([pred_ctr_x - half * pred_w, pred_ctr_y - half * pred_h,
                     pred_ctr_x + half * pred_w - one, pred_ctr_y + half * pred_h - one], axis=1)


def clip_boxes(tf, boxes, height, width, plus_one):
    """Caffe2's ``utils::clip_boxes``: x into ``[0, width - plus_one]``, y into
    ``[0, height - plus_one]`` (``height``/``width`` float32 scalars, already integers)."""
    one = f32(tf, float(plus_one))
    x_max, y_max = width - one, height - one
    x1, y1, x2, y2 = tf.unstack(boxes, 4, axis=1)
    zero = f32(tf, 0.0)
    return tf.stack([tf.maximum(tf.minimum(x1, x_max), zero),
                     tf.maximum(tf.minimum(y1, y_max), zero),
                     tf.maximum(tf.minimum(x2, x_max), zero),
                     tf.maximum(tf.minimum(y2, y_max), zero)], axis=1)


def _overlaps(tf, boxes, areas, i, plus_one):
    """IoU of box ``i`` with every box, Caffe2's ``nms_cpu`` arithmetic (NaN for two empty
    boxes: ``0 / 0``)."""
    one = f32(tf, float(plus_one))
    x1, y1, x2, y2 = tf.unstack(boxes, 4, axis=1)
    w = tf.maximum(tf.minimum(x2, x2[i]) - tf.maximum(x1, x1[i]) + one, 0.0)
    h = tf.maximum(tf.minimum(y2, y2[i]) - tf.maximum(y1, y1[i]) + one, 0.0)
    inter = w * h
    return inter / (areas[i] + areas - inter)


def _areas(tf, boxes, plus_one):
    one = f32(tf, float(plus_one))
    x1, y1, x2, y2 = tf.unstack(boxes, 4, axis=1)
    return (x2 - x1 + one) * (y2 - y1 + one)


# the most entries of the per-class IoU blocks (classes x n x n, n the most candidates of a
# class) that greedy_nms builds; past it, it loops over kept boxes instead
NMS_BLOCK_LIMIT = 1 << 22


def greedy_nms(tf, boxes, alive, classes, num_classes, thresh, plus_one, limit=None,
               block_limit=NMS_BLOCK_LIMIT):
    """Caffe2's ``nms_cpu`` over candidates in priority order, every class at once.

    ``boxes`` ``[K, 4]`` are sorted by class, then by score from high to low; ``alive``
    ``[K]`` marks the candidates; ``classes`` ``[K]`` int32 in ``[0, num_classes)``. Per
    class, the first alive candidate is kept, and every later one of its class whose IoU
    with it is not ``<= thresh`` (so NaN suppresses) is dropped, until none is left or the
    class has ``limit`` kept. Returns the kept mask ``[K]``.

    When the per-class IoU blocks hold at most ``block_limit`` entries, each class's IoU
    matrix is computed once and the kept set is found as the fixed point of "kept: alive
    and suppressed by no earlier kept one" (Cluster-NMS: exactly greedy NMS, reached in a
    few matrix steps); the first ``limit`` kept of each class stay. Otherwise a loop keeps
    one candidate of every class per step (the steps are the most any class keeps).
    """
    k = tf.shape(boxes)[0]
    counts = tf.math.unsorted_segment_sum(tf.ones_like(classes), classes, num_classes)
    n = tf.reduce_max(tf.concat([counts, [0]], 0))
    small = tf.cast(num_classes, tf.int64) * tf.cast(n, tf.int64) ** 2 <= block_limit
    return tf.cond(small,
                   lambda: _block_nms(tf, boxes, alive, classes, num_classes, counts, n,
                                      thresh, plus_one, limit),
                   lambda: _loop_nms(tf, boxes, alive, classes, num_classes, thresh,
                                     plus_one, limit, k))


def _block_nms(tf, boxes, alive, classes, num_classes, counts, n, thresh, plus_one, limit):
    """greedy_nms on per-class IoU blocks ``[classes, n, n]``."""
    starts = tf.cumsum(counts, exclusive=True)
    place = tf.stack([classes, tf.range(tf.shape(boxes)[0]) - tf.gather(starts, classes)], 1)
    shape = [num_classes, n]
    valid = tf.scatter_nd(place, alive, shape)
    padded = tf.scatter_nd(place, boxes, [num_classes, n, 4])
    one = f32(tf, float(plus_one))
    x1, y1, x2, y2 = tf.unstack(padded, 4, axis=2)
    areas = (x2 - x1 + one) * (y2 - y1 + one)

    def pair(v, fn):  # [C, n, n]: row a (the earlier, kept box), column b
        return fn(v[:, :, None], v[:, None, :])

    w = tf.maximum(pair(x2, tf.minimum) - pair(x1, tf.maximum) + one, 0.0)
    h = tf.maximum(pair(y2, tf.minimum) - pair(y1, tf.maximum) + one, 0.0)
    inter = w * h
    ovr = inter / (areas[:, :, None] + areas[:, None, :] - inter)
    # Caffe2 keeps `ovr <= thresh`: NaN suppresses (no logical_not: see _loop_nms)
    later = tf.range(n)[:, None] < tf.range(n)[None, :]
    suppresses = ((ovr > f32(tf, thresh)) | tf.math.is_nan(ovr)) & later[None]

    def step(kept, _):  # kept: alive and suppressed by no earlier kept one
        hit = tf.reduce_any(suppresses & kept[:, :, None], axis=1)
        return valid & tf.logical_not(hit), kept

    kept, _ = tf.while_loop(lambda kept, before: tf.reduce_any(tf.not_equal(kept, before)),
                            step, step(valid, None))
    if limit is not None:
        kept = kept & (tf.cumsum(tf.cast(kept, tf.int32), axis=1, exclusive=True) < limit)
    return tf.gather_nd(kept, place)


def _loop_nms(tf, boxes, alive, classes, num_classes, thresh, plus_one, limit, k):
    """greedy_nms by a loop over kept boxes, every class at once."""
    index = tf.range(k)
    areas = _areas(tf, boxes, plus_one)
    thresh = f32(tf, thresh)
    one = f32(tf, float(plus_one))
    x1, y1, x2, y2 = tf.unstack(boxes, 4, axis=1)

    def body(alive, kept, counts):
        first = tf.math.unsorted_segment_min(tf.where(alive, index, k), classes, num_classes)
        has = first < k
        pick = tf.minimum(first, tf.maximum(k - 1, 0))
        own = tf.gather(pick, classes)  # each candidate's class's kept box
        is_pick = alive & tf.equal(index, own)
        w = tf.maximum(tf.minimum(x2, tf.gather(x2, own)) - tf.maximum(x1, tf.gather(x1, own))
                       + one, 0.0)
        h = tf.maximum(tf.minimum(y2, tf.gather(y2, own)) - tf.maximum(y1, tf.gather(y1, own))
                       + one, 0.0)
        inter = w * h
        ovr = inter / (tf.gather(areas, own) + areas - inter)
        # Caffe2 keeps `ovr <= thresh`: NaN suppresses. Spelled without logical_not, which
        # TensorFlow's graph optimizer may fold into `ovr > thresh` (NaN kept).
        suppressed = (ovr > thresh) | tf.math.is_nan(ovr)
        alive = alive & tf.logical_not(suppressed | is_pick)
        counts = counts + tf.cast(has, tf.int32)
        if limit is not None:
            alive = alive & (tf.gather(counts, classes) < limit)
        return alive, kept | is_pick, counts

    _, kept, _ = tf.while_loop(
        lambda alive, *_: tf.reduce_any(alive), body,
        (alive, tf.zeros([k], tf.bool), tf.zeros([num_classes], tf.int32)))
    return kept


def soft_nms(tf, boxes, scores, alive, classes, method, sigma, overlap_thresh, min_score,
             plus_one):
    """Caffe2's ``soft_nms_cpu`` per class (``method`` "linear" or "gaussian").

    Candidates ``[K]`` are grouped by class (ascending). Within the lowest class with
    candidates pending, the highest current score is kept (the first on ties); the others
    of its class are rescored by ``1 - IoU`` where IoU ``> overlap_thresh`` (linear) or by
    ``exp(-IoU^2 / sigma)`` (gaussian), and those falling under ``min_score`` are dropped.
    Returns ``(kept indices in the order kept, the rescored scores [K])``.
    """
    k = tf.shape(boxes)[0]
    index = tf.range(k)
    areas = _areas(tf, boxes, plus_one)
    overlap_thresh, min_score = f32(tf, overlap_thresh), f32(tf, min_score)

    def body(pending, current, kept):
        first = tf.argmax(tf.cast(pending, tf.int32), output_type=tf.int32)
        group = pending & tf.equal(classes, classes[first])
        masked = tf.where(group, current, tf.fill([k], -np.inf))
        i = tf.argmax(masked, output_type=tf.int32)
        ovr = _overlaps(tf, boxes, areas, i, plus_one)
        if method == "linear":
            weight = tf.where(ovr > overlap_thresh, 1.0 - ovr, tf.ones_like(ovr))
        else:
            ovr64 = tf.cast(ovr, tf.float64)
            weight = tf.cast(tf.exp(-1.0 * ovr64 * ovr64 / float(np.float32(sigma))),
                             tf.float32)
        rest = group & tf.not_equal(index, i)
        current = tf.where(rest, current * weight, current)
        pending = (pending & tf.logical_not(group)) | (rest & (current >= min_score))
        return pending, current, kept.write(kept.size(), i)

    _, current, kept = tf.while_loop(
        lambda pending, *_: tf.reduce_any(pending), body,
        (alive, scores, tf.TensorArray(tf.int32, size=0, dynamic_size=True)))
    return kept.stack(), current


class DetectionLayer(keras.layers.Layer):
    """The base of the detection layers: TensorFlow only (refused at construction)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _check_backend(self)  # refuses another backend here, at construction

    @property
    def _tf(self):
        # not stored on the layer: Keras and tf.function would track the module
        return _backend.tensorflow(FEATURE)
