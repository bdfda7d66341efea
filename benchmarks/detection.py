"""Caffe2's detection ops as tfinit layers beside the TensorFlow kernels doing the same work.

``python -m benchmarks.detection [--quick | --smoke]`` prints a Markdown table (ms per call,
medians of interleaved runs, ``ratio`` = tfinit / TensorFlow; the goal is within 2x):

- ``Caffe2RoIAlign`` (``sampling_ratio=2``, ``aligned=1``: 2 x 2 bilinear points per bin,
  averaged) beside ``tf.image.crop_and_resize`` to ``2 pooled`` x ``2 pooled`` followed by a
  2 x 2 average pool: the same points sampled, at ResNet-50-FPN sizes (a 200 x 200 x 256
  feature map, 1000 rois, 7 x 7 bins).
- ``Caffe2BoxWithNMSLimit`` (hard NMS 0.5, score 0.05, 100 detections) beside
  ``tf.image.combined_non_max_suppression`` (per-class NMS and the top 100 over classes, one
  kernel) on the same 1000 boxes x 80 foreground classes. The scores are softmax over 81
  classes of peaked logits, so that each class keeps a few tens of candidates above 0.05, as
  a trained detector's box head gives.

- ``Caffe2GenerateProposals`` (one FPN level: 200 x 200 cells x 3 anchors, pre- and post-NMS
  top 1000, NMS 0.7) beside ``tf.math.top_k``, the same decoding and clipping, and
  ``tf.image.non_max_suppression``.

Both sides run inside a ``tf.function`` (traced once before timing).

Measured (full sizes, 15 interleaved rounds, 2 shared CPU cores, TensorFlow 2.21, Keras 3.15,
2026-12-07, after issue 50's changes; the run before them and a second run are in
``docs/performance.md``): RoIAlign 244 ms vs 257 ms (ratio 0.99, 95 % CI 0.88-1.05);
BoxWithNMSLimit 3.9 ms vs 1.5 ms (2.73, CI 2.49-2.80); GenerateProposals 10.6 ms vs 10.1 ms
(1.10, CI 1.08-1.13).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

SIZES = {  # (feature side, channels, rois, pooled) and (boxes, foreground classes), repeats
    "full": ((200, 256, 1000, 7), (1000, 80), 15),
    "quick": ((100, 256, 500, 7), (500, 80), 7),
    "smoke": ((16, 8, 20, 2), (30, 5), 2),
}


def _rois(rng, count, side, stride):
    """``count`` rois ``[count, 5]`` in image pixels (image 0) on a ``side``-cell map:
    sides 2 to 16 cells (what FPN's level assignment sends to one level), inside the map by
    at least a cell (where Caffe2's edge rule and crop_and_resize's agree)."""
    half = rng.uniform(1, min(8, side / 4), (count, 2))
    centre = rng.uniform(half + 1, side - 2 - half, (count, 2))
    boxes = np.concatenate([centre - half, centre + half], axis=1) * stride
    return np.concatenate([np.zeros((count, 1)), boxes], axis=1).astype(np.float32)


def roi_align_row(mode):
    import tensorflow as tf

    from benchmarks._timing import compare
    from tfinit.caffe2._detection import Caffe2RoIAlign

    (side, channels, count, pooled), _, repeats = SIZES[mode]
    rng = np.random.default_rng(0)
    stride = 4.0
    x = tf.constant(rng.normal(size=(1, side, side, channels)).astype(np.float32))
    rois = tf.constant(_rois(rng, count, side, stride))
    layer = Caffe2RoIAlign(1.0 / stride, pooled, pooled, 2, True)
    ours = tf.function(lambda x, r: layer(x, r))
    # the same 2 x 2 points per bin: crop_and_resize samples a (2p) x (2p) grid whose points
    # are the bins' sampling points when the box is given by the outermost point centres
    box = rois[:, 1:] / stride - 0.5
    step = (box[:, 2:] - box[:, :2]) / (2 * pooled)
    first, last = box[:, :2] + 0.5 * step, box[:, 2:] - 0.5 * step
    norm = tf.concat([first[:, ::-1], last[:, ::-1]], axis=1) / float(side - 1)
    index = tf.zeros([count], tf.int32)

    @tf.function
    def baseline(x, norm):
        crops = tf.image.crop_and_resize(x, norm, index, (2 * pooled, 2 * pooled))
        return tf.nn.avg_pool2d(crops, 2, 2, "VALID")

    check = np.max(np.abs(ours(x, rois).numpy() - baseline(x, norm).numpy()))
    row = compare(f"RoIAlign {side}x{side}x{channels}, {count} rois, {pooled}x{pooled}, "
                  f"sampling_ratio 2 vs crop_and_resize + 2x2 avg pool",
                  lambda: ours(x, rois).numpy(), lambda: baseline(x, norm).numpy(), repeats)
    row["max_abs_difference"] = float(check)  # the same points: only edge rules differ
    return row


def nms_row(mode):
    import tensorflow as tf

    from benchmarks._timing import compare
    from tfinit.caffe2._detection import Caffe2BoxWithNMSLimit

    _, (count, classes), repeats = SIZES[mode]
    rng = np.random.default_rng(1)
    boxes = _rois(rng, count, 200, 4.0)[:, 1:]
    moved = boxes[:, None, :] + rng.normal(0, 4, (count, classes + 1, 4))
    moved = np.concatenate([np.minimum(moved[..., :2], moved[..., 2:]),
                            np.maximum(moved[..., :2], moved[..., 2:])], axis=-1)
    logits = rng.normal(0, 1, (count, classes + 1))
    logits[np.arange(count), rng.integers(1, classes + 1, count)] += 4.0
    logits[:, 0] += 2.0
    scores = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    scores_t = tf.constant(scores.astype(np.float32))
    boxes_t = tf.constant(moved.reshape(count, -1).astype(np.float32))
    layer = Caffe2BoxWithNMSLimit(0.05, 0.5, 100, legacy_plus_one=False)
    ours = tf.function(lambda s, b: layer(s, b))
    # combined NMS takes [y1, x1, y2, x2] boxes per class, the foreground classes only
    tf_boxes = tf.constant(moved[:, 1:, :][..., [1, 0, 3, 2]][None].astype(np.float32))
    tf_scores = tf.constant(scores[:, 1:][None].astype(np.float32))

    @tf.function
    def baseline(b, s):
        return tf.image.combined_non_max_suppression(b, s, 100, 100, 0.5, 0.05,
                                                     clip_boxes=False)

    candidates = int((scores[:, 1:] > 0.05).sum())
    kept = int(ours(scores_t, boxes_t)[0].shape[0])
    row = compare(f"BoxWithNMSLimit {count} boxes x {classes} classes ({candidates} above "
                  f"0.05) vs combined_non_max_suppression",
                  lambda: ours(scores_t, boxes_t)[0].numpy(),
                  lambda: baseline(tf_boxes, tf_scores).nmsed_scores.numpy(), repeats)
    row["detections"] = kept
    return row


def proposals_row(mode):
    import tensorflow as tf

    from benchmarks._timing import compare
    from tfinit.caffe2._detection import Caffe2GenerateProposals
    from tfinit.caffe2._detection_boxes import bbox_transform

    (side, _, _, _), _, repeats = SIZES[mode]
    top = {"full": 1000, "quick": 1000, "smoke": 50}[mode]
    rng = np.random.default_rng(2)
    anchors = [[-22.6, -11.3, 22.6, 11.3], [-16, -16, 16, 16], [-11.3, -22.6, 11.3, 22.6]]
    scores = tf.constant(rng.uniform(size=(1, side, side, 3)).astype(np.float32))
    deltas = tf.constant(rng.normal(0, 0.2, (1, side, side, 12)).astype(np.float32))
    im_info = tf.constant([[4.0 * side, 4.0 * side, 1.0]])
    layer = Caffe2GenerateProposals(anchors, 0.25, top, top, 0.7, 0.0, False)
    ours = tf.function(lambda s, d, i: layer(s, d, i))
    shifts = np.stack(np.meshgrid(np.arange(side) * 4.0, np.arange(side) * 4.0,
                                  indexing="xy"), -1).reshape(-1, 1, 2)
    all_anchors = tf.constant((np.tile(shifts, (1, 1, 2)) + np.array(anchors)[None])
                              .reshape(-1, 4).astype(np.float32))

    @tf.function
    def baseline(s, d):  # the same top-N, decoding and clipping, then TensorFlow's NMS
        best = tf.math.top_k(tf.reshape(s, [-1]), top)
        boxes = bbox_transform(tf, tf.gather(all_anchors, best.indices),
                               tf.gather(tf.reshape(d, [-1, 4]), best.indices),
                               (1.0, 1.0, 1.0, 1.0), False)
        boxes = tf.clip_by_value(boxes, 0.0, 4.0 * side)
        keep = tf.image.non_max_suppression(tf.gather(boxes, [1, 0, 3, 2], axis=1),
                                            best.values, top, 0.7)
        return tf.gather(boxes, keep)

    kept = int(ours(scores, deltas, im_info)[0].shape[0])
    row = compare(f"GenerateProposals {side}x{side}x3 anchors, pre/post NMS top {top} vs "
                  f"top_k + the same decoding + non_max_suppression",
                  lambda: ours(scores, deltas, im_info)[0].numpy(),
                  lambda: baseline(scores, deltas).numpy(), repeats)
    row["detections"] = kept
    return row


def run(mode="full"):
    return [roi_align_row(mode), nms_row(mode), proposals_row(mode)]


def main(argv=None):
    from benchmarks._markdown import print_table_main

    return print_table_main(run, "python -m benchmarks.detection", __doc__.splitlines()[0],
                            argv)


if __name__ == "__main__":
    sys.exit(main())
