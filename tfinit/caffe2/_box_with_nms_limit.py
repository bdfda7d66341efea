"""Caffe2's BoxWithNMSLimit as a Keras layer (TensorFlow): per-class NMS or soft-NMS and the
per-image detection limit, with every output of Caffe2 1.8.1's op. The box arithmetic and
the NMS loops are in ``tfinit/caffe2/_detection_boxes.py``; ``tfinit/caffe2/_detection.py``
holds the other detection layers and names this one too.
"""

import keras

from tfinit.caffe2._detection_boxes import (DetectionLayer, f32, finite, greedy_nms,
                                            per_image, require, same_rows, soft_nms)


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2BoxWithNMSLimit(DetectionLayer):
    """Caffe2's BoxWithNMSLimit: per-class NMS and the per-image detection limit.

    Rows are read as contiguous blocks of ``batch_splits`` rows, one per image (without
    ``batch_splits``: one image). In each image and each foreground class ``j`` (score column
    ``j`` with ``input_boxes_include_bg_cls``, else ``j - 1``; box columns of class ``j``, or
    the one box with ``cls_agnostic_bbox_reg``), the boxes scoring above ``score_thresh``
    go through greedy NMS (highest score first; IoU with Caffe2's ``legacy_plus_one``
    areas; not ``<= nms`` suppresses; at most ``detections_per_im`` per class) or soft-NMS
    (``soft_nms_method`` "linear" or "gaussian": the others are rescored, those under
    ``soft_nms_min_score_thres`` dropped; the output scores are the rescored ones). When the
    image keeps more than ``detections_per_im`` (> 0), only that many highest scores across
    classes stay. Output rows: by image, then class ascending, then score descending (not
    sorted by score overall).

    Args:
        score_thresh, nms, detections_per_im, soft_nms_sigma, soft_nms_min_score_thres,
            cls_agnostic_bbox_reg, input_boxes_include_bg_cls, output_classes_include_bg_cls,
            legacy_plus_one: Caffe2's arguments of those names.
        soft_nms_method: ``"none"`` (hard NMS), ``"linear"`` or ``"gaussian"``.
        num_outputs: 3 (scores, boxes, classes), 4 (and batch_splits) or 6 (and keeps,
            keeps_size).
        **kwargs: base ``keras.layers.Layer`` arguments.

    Called with ``images`` (the ``im_info`` ``[N, 3]`` of the BBoxTransform that made the
    boxes) and no ``batch_splits``, it refuses N > 1 when run: Caffe2 would merge the images'
    rows into one image's detections, with no image index.

    Returns:
        Called on ``(scores [R, K], boxes [R, 4 * box classes][, batch_splits [N]])``: a list
        of ``scores [D]``, ``boxes [D, 4]``, ``classes [D]`` (float32; ``j``, or ``j - 1``
        without ``output_classes_include_bg_cls``), ``batch_splits [N]`` (float32),
        ``keeps [D]`` (int32 row indices within the image's block), ``keeps_size [N, K]``
        (int32 per class, column 0 the background's 0).

    Raises:
        ValueError: a backend other than TensorFlow, a bad ``soft_nms_method`` or
            ``num_outputs``; when run (``InvalidArgumentError``): scores and boxes of other
            row counts, a NaN or inf in them, ``batch_splits`` negative or not summing to the
            rows, several ``images`` without ``batch_splits``.

    Example:

    >>> import numpy as np
    >>> from tfinit.caffe2._detection import Caffe2BoxWithNMSLimit
    >>> scores = np.array([[0.1, 0.9], [0.2, 0.8], [0.3, 0.6]], "float32")
    >>> boxes = np.array([[0, 0, 9, 9] * 2, [1, 1, 10, 10] * 2, [20, 20, 29, 29] * 2],
    ...                  "float32")
    >>> kept, kept_boxes, classes = Caffe2BoxWithNMSLimit(nms=0.5)(scores, boxes)
    >>> [round(float(s), 2) for s in kept], classes.numpy().tolist()
    ([0.9, 0.6], [1.0, 1.0])
    """

    def __init__(self, score_thresh=0.05, nms=0.3, detections_per_im=100,
                 soft_nms_method="none", soft_nms_sigma=0.5, soft_nms_min_score_thres=0.001,
                 cls_agnostic_bbox_reg=False, input_boxes_include_bg_cls=True,
                 output_classes_include_bg_cls=True, legacy_plus_one=True, num_outputs=3,
                 **kwargs):
        super().__init__(**kwargs)
        if soft_nms_method not in ("none", "linear", "gaussian"):
            raise ValueError(f"Argument `soft_nms_method` must be 'none', 'linear' or "
                             f"'gaussian'. Received: soft_nms_method={soft_nms_method!r}")
        if num_outputs not in (3, 4, 6):
            raise ValueError(f"Argument `num_outputs` must be 3, 4 or 6. Received: "
                             f"num_outputs={num_outputs!r}")
        self.score_thresh, self.nms = float(score_thresh), float(nms)
        self.detections_per_im = int(detections_per_im)
        self.soft_nms_method = soft_nms_method
        self.soft_nms_sigma = float(soft_nms_sigma)
        self.soft_nms_min_score_thres = float(soft_nms_min_score_thres)
        self.cls_agnostic_bbox_reg = bool(cls_agnostic_bbox_reg)
        self.input_boxes_include_bg_cls = bool(input_boxes_include_bg_cls)
        self.output_classes_include_bg_cls = bool(output_classes_include_bg_cls)
        self.legacy_plus_one = bool(legacy_plus_one)
        self.num_outputs = int(num_outputs)

    def get_config(self):
        return {**super().get_config(), "score_thresh": self.score_thresh, "nms": self.nms,
                "detections_per_im": self.detections_per_im,
                "soft_nms_method": self.soft_nms_method,
                "soft_nms_sigma": self.soft_nms_sigma,
                "soft_nms_min_score_thres": self.soft_nms_min_score_thres,
                "cls_agnostic_bbox_reg": self.cls_agnostic_bbox_reg,
                "input_boxes_include_bg_cls": self.input_boxes_include_bg_cls,
                "output_classes_include_bg_cls": self.output_classes_include_bg_cls,
                "legacy_plus_one": self.legacy_plus_one, "num_outputs": self.num_outputs}

    def compute_output_spec(self, scores, boxes, batch_splits=None, images=None):
        specs = [keras.KerasTensor((None,), "float32"), keras.KerasTensor((None, 4), "float32"),
                 keras.KerasTensor((None,), "float32"), keras.KerasTensor((None,), "float32"),
                 keras.KerasTensor((None,), "int32"),
                 keras.KerasTensor((None, scores.shape[-1]), "int32")]
        return specs[:self.num_outputs]

    def _one_image_only(self, images):
        tf = self._tf
        count = tf.shape(images)[0]
        return require(tf, count <= 1,
                       f"BoxWithNMSLimit (layer {self.name!r}) without a `batch_splits` input "
                       f"treats every row as one image, as Caffe2 does, so a batch of several "
                       f"images would merge their detections with no image index: feed "
                       f"batch_splits (BBoxTransform's second output, roi_batch_splits) to "
                       f"BoxWithNMSLimit or run the images one by one (a batch of 1)")

    def call(self, scores, boxes, batch_splits=None, images=None):
        tf = self._tf
        scores = tf.convert_to_tensor(scores, tf.float32)
        boxes = tf.convert_to_tensor(boxes, tf.float32)
        op = "BoxWithNMSLimit"
        checks = [finite(tf, op, "scores", scores), finite(tf, op, "boxes", boxes),
                  same_rows(tf, op, "scores", scores, "boxes", boxes,
                            "one row of boxes per row of scores")]
        with tf.control_dependencies(checks):
            scores, boxes = tf.identity(scores), tf.identity(boxes)
        rows = tf.shape(scores)[0]
        num_classes = scores.shape[-1]
        if batch_splits is None:  # one image: its rows, no loop over images
            if images is not None:
                with tf.control_dependencies([self._one_image_only(images)]):
                    scores = tf.identity(scores)
            out = self._one_image(scores, boxes, num_classes)
        else:
            out = self._per_image(scores, boxes, batch_splits, rows, num_classes)
        scores_out, boxes_out, classes, keeps, counts, keeps_size = out
        result = [scores_out, boxes_out, classes, tf.cast(counts, tf.float32), keeps,
                  keeps_size]
        return result[:self.num_outputs]

    def _per_image(self, scores, boxes, batch_splits, rows, num_classes):
        """_one_image on each image's block of ``batch_splits`` rows, concatenated."""
        tf = self._tf
        splits = tf.convert_to_tensor(batch_splits, tf.float32)
        check = require(tf, tf.math.is_finite(splits) & (splits >= 0.0),
                        "BoxWithNMSLimit: input `batch_splits` must hold finite, "
                        "non-negative row counts")
        with tf.control_dependencies([check]):
            splits = tf.cast(splits, tf.int32)
        check = require(tf, tf.equal(tf.reduce_sum(splits), rows), "BoxWithNMSLimit: "
                        "batch_splits must sum to the rows of scores (Caffe2: "
                        "batch_splits.sum() == N)")
        with tf.control_dependencies([check]):
            splits = tf.identity(splits)
        starts = tf.cumsum(splits, exclusive=True)

        def one_image(b):
            block = tf.range(starts[b], starts[b] + splits[b])
            return self._one_image(tf.gather(scores, block), tf.gather(boxes, block),
                                   num_classes)

        return per_image(tf, tf.shape(splits)[0], one_image,
                         [(tf.float32, [None]), (tf.float32, [None, 4]),
                          (tf.float32, [None]), (tf.int32, [None]), (tf.int32, [None]),
                          (tf.int32, [None, num_classes])])

    def _candidates(self, scores, boxes, num_classes):
        """The (class j >= 1, row) pairs scoring above ``score_thresh``, class-major, then
        by row: score, box, class, row (only they take part in NMS)."""
        tf = self._tf
        if num_classes < 2:
            return (tf.zeros([0]), tf.zeros([0, 4]), tf.zeros([0], tf.int32),
                    tf.zeros([0], tf.int32))
        start = 1 if self.input_boxes_include_bg_cls else 0
        by_class = tf.transpose(scores[:, start:start + num_classes - 1])  # [classes, R]
        above = tf.cast(tf.where(by_class > f32(tf, self.score_thresh)), tf.int32)
        column, row = above[:, 0], above[:, 1]
        box = tf.zeros_like(column) if self.cls_agnostic_bbox_reg else column + start
        per_class = tf.reshape(boxes, [tf.shape(boxes)[0], tf.shape(boxes)[1] // 4, 4])
        return (tf.gather_nd(by_class, above), tf.gather_nd(per_class, tf.stack([row, box], 1)),
                column + 1, row)

    def _one_image(self, scores, boxes, num_classes):
        tf = self._tf
        cand_scores, cand_boxes, classes, row = self._candidates(scores, boxes, num_classes)
        alive = tf.ones_like(cand_scores, tf.bool)
        if self.soft_nms_method == "none":
            # class-major already; within a class, highest score first (stable)
            rank = self._class_rank(cand_scores, classes, num_classes)
            order = tf.argsort(rank, stable=True)
            cand_scores, cand_boxes, classes, row, alive = (
                tf.gather(v, order) for v in (cand_scores, cand_boxes, classes, row, alive))
            limit = self.detections_per_im if self.detections_per_im > 0 else None
            kept = greedy_nms(tf, cand_boxes, alive, classes, num_classes, self.nms,
                              self.legacy_plus_one, limit)
            kept = tf.cast(tf.where(kept)[:, 0], tf.int32)
            final = cand_scores
        else:
            kept, final = soft_nms(tf, cand_boxes, cand_scores, alive, classes,
                                   self.soft_nms_method, self.soft_nms_sigma, self.nms,
                                   self.soft_nms_min_score_thres, self.legacy_plus_one)
        kept_scores = tf.gather(final, kept)
        if self.detections_per_im > 0:
            # the detections_per_im highest scores across classes, in the same order
            by_score = tf.argsort(kept_scores, direction="DESCENDING", stable=True)
            rank = tf.math.invert_permutation(by_score)
            kept = tf.boolean_mask(kept, rank < self.detections_per_im)
            kept_scores = tf.gather(final, kept)
        kept_classes = tf.gather(classes, kept)
        label = tf.cast(kept_classes - (0 if self.output_classes_include_bg_cls else 1),
                        tf.float32)
        keeps_size = tf.math.unsorted_segment_sum(tf.ones_like(kept_classes), kept_classes,
                                                  num_classes)
        return (kept_scores, tf.gather(cand_boxes, kept), label, tf.gather(row, kept),
                tf.shape(kept)[:1], keeps_size[None])

    def _class_rank(self, scores, classes, num_classes):
        """A sort key: class ascending, then score descending, then row (stable)."""
        tf = self._tf
        by_score = tf.argsort(scores, direction="DESCENDING", stable=True)
        score_rank = tf.math.invert_permutation(by_score)
        size = tf.shape(scores)[0]
        return classes * size + score_rank
