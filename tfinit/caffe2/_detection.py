"""Caffe2's five detection operators as Keras layers, computing what Caffe2 1.8.1 computes.

``Caffe2RoIAlign``, ``Caffe2GenerateProposals``, ``Caffe2BBoxTransform``,
``Caffe2BoxWithNMSLimit`` and ``Caffe2CollectAndDistributeFpnRpnProposals`` take Caffe2's
inputs in Caffe2's order and return Caffe2's outputs in Caffe2's order (a list when there are
several), with two layout rules of the converter: 4-D feature maps are NHWC (RoIAlign's X and
output, GenerateProposals' scores ``[N, H, W, A]`` and deltas ``[N, H, W, 4A]``, channel
``a * 4 + k``), and the first axis of every input and output is free (rois, proposals and
detections have data-dependent row counts). Their arguments are plain values, as
``tfinit/caffe2/_detection_args.py`` reads them from an op.

The outputs' row counts depend on the values, so the layers run on Keras's TensorFlow backend
only (TensorFlow ops, ``tf.while_loop`` for the greedy NMS); constructing one on another
backend raises ``ValueError``. The rules (legacy ``+1`` widths, clipping, adaptive sampling,
NMS order and ties, soft-NMS rescoring, output order and dtypes) are stated on each class and
were checked against the cases Caffe2 1.8.1 computed (``tests/caffe2/test_detection_ops.py``).

Each layer is registered as ``"tfinit>ClassName"``. The box arithmetic and NMS are in
``tfinit/caffe2/_detection_boxes.py``; BoxWithNMSLimit's layer is in
``tfinit/caffe2/_box_with_nms_limit.py`` and RoIAlign's in ``tfinit/caffe2/_roi_align.py``,
both named here too, so this module holds all five.
"""

import math

import keras
import numpy as np

from tfinit.caffe2._box_with_nms_limit import Caffe2BoxWithNMSLimit
from tfinit.caffe2._roi_align import Caffe2RoIAlign
from tfinit.caffe2._detection_boxes import (DetectionLayer, bbox_transform, clip_boxes, f32,
                                            finite, greedy_nms, image_info, per_image,
                                            require, same_rows)

__all__ = ["Caffe2RoIAlign", "Caffe2BBoxTransform", "Caffe2GenerateProposals",
           "Caffe2BoxWithNMSLimit", "Caffe2CollectAndDistributeFpnRpnProposals"]


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2BBoxTransform(DetectionLayer):
    """Caffe2's BBoxTransform: rois moved by per-class deltas, clipped to the image.

    Rows are processed as contiguous blocks, one per image, of the sizes the rois' batch
    indices count (image i's block is the i-th, whatever the rows' indices say: Caffe2's rule,
    ``055_BBoxTransform_interleaved_images``). In block i the rois are divided by
    ``im_info[i, 2]``, moved (``bbox_transform``: ``weights``, ``legacy_plus_one`` widths,
    dw/dh capped at log(1000/16)), clipped to ``int(h / scale + 0.5)`` x
    ``int(w / scale + 0.5)`` and, with ``apply_scale``, multiplied back by the scale.

    Args:
        weights: ``(wx, wy, ww, wh)``, the deltas' divisors.
        apply_scale: scale the boxes back to the input's scale.
        legacy_plus_one: Detectron's ``+1`` widths and ``w - 1`` clipping.
        num_outputs: 1 (``box_out``) or 2 (also ``roi_batch_splits``, float32 counts).
        **kwargs: base ``keras.layers.Layer`` arguments.

    Returns:
        Called on ``(rois [R, 4 or 5], deltas [R, 4K], im_info [N, 3])``: ``box_out``
        ``[R, 4K]``, and ``roi_batch_splits`` ``[N]`` when ``num_outputs=2`` (a list).

    Raises:
        ValueError: on a backend other than TensorFlow; when run (``InvalidArgumentError``),
            rois and deltas of other row counts, a NaN or inf in them, an ``im_info`` value
            not positive and finite, a batch index out of ``[0, N)``, or 4-column rois with
            N > 1.

    Example:

    >>> import numpy as np
    >>> from tfinit.caffe2._detection import Caffe2BBoxTransform
    >>> rois = np.array([[0, 0, 0, 9, 9]], "float32")
    >>> im_info = np.array([[20, 20, 1]], "float32")
    >>> Caffe2BBoxTransform()(rois, np.zeros((1, 4), "float32"), im_info).numpy().tolist()
    [[0.0, 0.0, 9.0, 9.0]]
    """

    def __init__(self, weights=(1.0, 1.0, 1.0, 1.0), apply_scale=True, legacy_plus_one=True,
                 num_outputs=1, **kwargs):
        super().__init__(**kwargs)
        self.delta_weights = tuple(float(v) for v in weights)
        self.apply_scale = bool(apply_scale)
        self.legacy_plus_one = bool(legacy_plus_one)
        if num_outputs not in (1, 2):
            raise ValueError(f"Argument `num_outputs` must be 1 or 2. Received: "
                             f"num_outputs={num_outputs!r}")
        self.num_outputs = int(num_outputs)

    def get_config(self):
        return {**super().get_config(), "weights": list(self.delta_weights),
                "apply_scale": self.apply_scale, "legacy_plus_one": self.legacy_plus_one,
                "num_outputs": self.num_outputs}

    def compute_output_spec(self, rois, deltas, im_info):
        boxes = keras.KerasTensor((None, deltas.shape[-1]), "float32")
        if self.num_outputs == 1:
            return boxes
        return [boxes, keras.KerasTensor((None,), "float32")]

    def call(self, rois, deltas, im_info):
        tf = self._tf
        rois = tf.convert_to_tensor(rois, tf.float32)
        deltas = tf.convert_to_tensor(deltas, tf.float32)
        im_info = tf.convert_to_tensor(im_info, tf.float32)
        op = "BBoxTransform"
        first = [finite(tf, op, "rois", rois), finite(tf, op, "deltas", deltas),
                 image_info(tf, op, im_info),
                 same_rows(tf, op, "rois", rois, "deltas", deltas, "one row of deltas per roi")]
        with tf.control_dependencies(first):
            rois, deltas, im_info = (tf.identity(v) for v in (rois, deltas, im_info))
        r = tf.shape(rois)[0]
        batch = tf.shape(im_info)[0]
        if rois.shape[-1] == 5:
            ids = tf.cast(rois[:, 0], tf.int32)
            box = rois[:, 1:]
            checks = [require(tf, ids >= 0, "BBoxTransform: a roi's batch index is negative"),
                      require(tf, ids < batch, "BBoxTransform: a roi's batch index is not below "
                              "im_info's rows (Caffe2: roi_batch_id < batch_size)")]
        else:
            ids = tf.zeros([r], tf.int32)
            box = rois
            checks = [require(tf, tf.equal(batch, 1), "BBoxTransform: 4-column rois take one "
                              "image (Caffe2: batch_size == 1): input `im_info` must have 1 row")]
        with tf.control_dependencies(checks):
            counts = tf.math.bincount(ids, minlength=batch, maxlength=batch, dtype=tf.int32)
        # the i-th contiguous block of rows is image i's (Caffe2's rule, see the docstring)
        block = tf.searchsorted(tf.cumsum(counts), tf.range(r), side="right")
        info = tf.gather(im_info, block)
        scale = info[:, 2]
        img_h = tf.floor(info[:, 0] / scale + 0.5)
        img_w = tf.floor(info[:, 1] / scale + 0.5)
        after = scale if self.apply_scale else tf.ones_like(scale)
        box = box / scale[:, None]
        classes = deltas.shape[-1] // 4
        out = []
        for k in range(classes):
            moved = bbox_transform(tf, box, deltas[:, 4 * k:4 * k + 4], self.delta_weights,
                                   self.legacy_plus_one)
            out.append(clip_boxes(tf, moved, img_h, img_w, self.legacy_plus_one)
                       * after[:, None])
        boxes = tf.concat(out, axis=1) if out else tf.zeros([r, 0], tf.float32)
        if self.num_outputs == 1:
            return boxes
        return [boxes, tf.cast(counts, tf.float32)]


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2GenerateProposals(DetectionLayer):
    """Caffe2's GenerateProposals (RPN proposals), per image.

    The anchors are laid on every cell (shifted by ``(w, h) / spatial_scale``; order: H, W,
    A), sorted by score (highest first; the first on ties), cut to ``pre_nms_topN`` when
    ``0 < pre_nms_topN < H W A``, moved by the deltas (weights 1, ``legacy_plus_one``
    widths), clipped to ``int(im_h)`` x ``int(im_w)``, filtered (width and height
    ``>= min_size * im_scale``, centre inside the image: a box clipped to zero width at the
    left or top edge is kept), then greedy NMS (IoU not ``<= nms_thresh`` suppresses) up to
    ``post_nms_topN`` when it is positive.

    Args:
        anchors: ``[A, 4]`` nested list (Caffe2's init-net blob).
        spatial_scale: 1 / the feature stride.
        pre_nms_top_n, post_nms_top_n, nms_thresh, min_size, legacy_plus_one: Caffe2's
            ``pre_nms_topN``, ``post_nms_topN``, ``nms_thresh``, ``min_size``,
            ``legacy_plus_one``.
        **kwargs: base ``keras.layers.Layer`` arguments.

    Returns:
        Called on ``(scores [N, H, W, A], deltas [N, H, W, 4A], im_info [N, 3])``:
        ``[rois [R, 5], rois_probs [R]]``, images in order.

    Raises:
        ValueError: anchors not ``[A, 4]``; a backend other than TensorFlow; when run
            (``InvalidArgumentError``): scores and deltas of other images, height or width,
            ``im_info`` not one positive, finite row per image, a NaN or inf score or delta.

    Example:

    >>> import numpy as np
    >>> from tfinit.caffe2._detection import Caffe2GenerateProposals
    >>> layer = Caffe2GenerateProposals([[-4, -4, 4, 4]], spatial_scale=0.25, min_size=0.0,
    ...                                 legacy_plus_one=False)
    >>> scores = np.array([0.9, 0.8, 0.2, 0.7], "float32").reshape(1, 2, 2, 1)
    >>> rois, probs = layer(scores, np.zeros((1, 2, 2, 4), "float32"),
    ...                     np.array([[8, 8, 1]], "float32"))
    >>> rois.numpy()[:2].tolist(), [round(float(p), 2) for p in probs]
    ([[0.0, 0.0, 0.0, 4.0, 4.0], [0.0, 0.0, 0.0, 8.0, 4.0]], [0.9, 0.8, 0.7, 0.2])
    """

    def __init__(self, anchors, spatial_scale=1.0 / 16.0, pre_nms_top_n=6000,
                 post_nms_top_n=300, nms_thresh=0.7, min_size=16.0, legacy_plus_one=True,
                 **kwargs):
        super().__init__(**kwargs)
        anchors_array = np.asarray(anchors, np.float32)
        if anchors_array.ndim != 2 or anchors_array.shape[1] != 4:
            raise ValueError(f"Argument `anchors` must be [A, 4] (x1, y1, x2, y2). Received: "
                             f"shape {anchors_array.shape}")
        self.anchors = anchors_array.tolist()
        self.spatial_scale = float(spatial_scale)
        self.pre_nms_top_n, self.post_nms_top_n = int(pre_nms_top_n), int(post_nms_top_n)
        self.nms_thresh, self.min_size = float(nms_thresh), float(min_size)
        self.legacy_plus_one = bool(legacy_plus_one)

    def get_config(self):
        return {**super().get_config(), "anchors": self.anchors,
                "spatial_scale": self.spatial_scale, "pre_nms_top_n": self.pre_nms_top_n,
                "post_nms_top_n": self.post_nms_top_n, "nms_thresh": self.nms_thresh,
                "min_size": self.min_size, "legacy_plus_one": self.legacy_plus_one}

    def compute_output_spec(self, scores, deltas, im_info):
        return [keras.KerasTensor((None, 5), "float32"), keras.KerasTensor((None,), "float32")]

    def call(self, scores, deltas, im_info):
        tf = self._tf
        scores = tf.convert_to_tensor(scores, tf.float32)
        deltas = tf.convert_to_tensor(deltas, tf.float32)
        im_info = tf.convert_to_tensor(im_info, tf.float32)
        a = len(self.anchors)
        if scores.shape[-1] not in (None, a) or deltas.shape[-1] not in (None, 4 * a):
            raise ValueError(f"{type(self).__name__} with {a} anchors takes scores [N, H, W, "
                             f"{a}] and deltas [N, H, W, {4 * a}]. Received: scores of shape "
                             f"{tuple(scores.shape)}, deltas of shape {tuple(deltas.shape)}")
        op = "GenerateProposals"
        checks = [finite(tf, op, "scores", scores), finite(tf, op, "bbox_deltas", deltas),
                  image_info(tf, op, im_info),
                  require(tf, tf.equal(tf.shape(scores)[:3], tf.shape(deltas)[:3]),
                          f"{op}: inputs `scores` and `bbox_deltas` must have the same images, "
                          f"height and width (one set of 4 deltas per anchor and cell)"),
                  same_rows(tf, op, "scores", scores, "im_info", im_info,
                            "im_info must have one row per image; Caffe2: im_info [num_images, 3]")]
        with tf.control_dependencies(checks):
            scores, deltas, im_info = (tf.identity(v) for v in (scores, deltas, im_info))
        shape = tf.shape(scores)
        height, width = shape[1], shape[2]
        stride = f32(tf, 1.0 / self.spatial_scale)
        shift_x = tf.cast(tf.range(width), tf.float32) * stride
        shift_y = tf.cast(tf.range(height), tf.float32) * stride
        sy, sx = tf.meshgrid(shift_y, shift_x, indexing="ij")
        shifts = tf.stack([sx, sy, sx, sy], axis=-1)[:, :, None, :]
        anchors = tf.constant(np.asarray(self.anchors, np.float32))
        all_anchors = tf.reshape(shifts + anchors[None, None], [-1, 4])

        def one_image(i):
            rois, probs = self._one_image(scores[i], deltas[i], im_info[i], all_anchors)
            ids = tf.fill([tf.shape(rois)[0], 1], tf.cast(i, tf.float32))
            return tf.concat([ids, rois], axis=1), probs

        return per_image(tf, shape[0], one_image,
                          [(tf.float32, [None, 5]), (tf.float32, [None])])

    def _one_image(self, scores, deltas, info, all_anchors):
        tf = self._tf
        scores = tf.reshape(scores, [-1])
        deltas = tf.reshape(deltas, [-1, 4])
        total = tf.size(scores)
        top = total if self.pre_nms_top_n <= 0 else tf.minimum(self.pre_nms_top_n, total)
        # top_k: sorted, and the lower index first on ties (a stable sort's order)
        order = tf.math.top_k(scores, top).indices
        scores = tf.gather(scores, order)
        proposals = bbox_transform(tf, tf.gather(all_anchors, order), tf.gather(deltas, order),
                                   (1.0, 1.0, 1.0, 1.0), self.legacy_plus_one)
        # Caffe2 passes im_info's float height and width to clip_boxes' int parameters
        proposals = clip_boxes(tf, proposals, tf.floor(info[0]), tf.floor(info[1]),
                               self.legacy_plus_one)
        one = f32(tf, float(self.legacy_plus_one))
        x1, y1, x2, y2 = tf.unstack(proposals, 4, axis=1)
        ws, hs = x2 - x1 + one, y2 - y1 + one
        min_size = f32(tf, self.min_size) * info[2]
        keep = ((ws >= min_size) & (hs >= min_size) & (x1 + ws / 2.0 < info[1])
                & (y1 + hs / 2.0 < info[0]))
        keep_index = tf.where(keep)[:, 0]
        proposals = tf.gather(proposals, keep_index)
        scores = tf.gather(scores, keep_index)
        kept = tf.cond(tf.reduce_all(ws * hs > 0.0),
                       lambda: self._tf_nms(proposals, scores),
                       lambda: self._caffe2_nms(proposals))
        return tf.gather(proposals, kept), tf.gather(scores, kept)

    def _tf_nms(self, proposals, scores):
        """``tf.image.non_max_suppression`` where it is Caffe2's ``nms_cpu``: no box of zero
        area (Caffe2's ``0 / 0`` IoU of two such boxes suppresses; TensorFlow's is 0). It
        suppresses an IoU ``> nms_thresh`` and takes the highest score first, the lower index
        on ties: the order the proposals are in. ``legacy_plus_one`` is given as ``+1`` on
        x2 and y2 (TensorFlow's widths ``(x2 + 1) - x1``, Caffe2's ``x2 - x1 + 1``: the same up
        to one rounding, which moves an IoU only within rounding of the threshold)."""
        tf = self._tf
        x1, y1, x2, y2 = tf.unstack(proposals, 4, axis=1)
        one = f32(tf, float(self.legacy_plus_one))
        boxes = tf.stack([y1, x1, y2 + one, x2 + one], axis=1)
        top = tf.shape(proposals)[0]
        if self.post_nms_top_n > 0:
            top = tf.minimum(top, self.post_nms_top_n)
        return tf.image.non_max_suppression(boxes, scores, top, self.nms_thresh)

    def _caffe2_nms(self, proposals):
        tf = self._tf
        k = tf.shape(proposals)[0]
        limit = self.post_nms_top_n if self.post_nms_top_n > 0 else None
        kept = greedy_nms(tf, proposals, tf.ones([k], tf.bool), tf.zeros([k], tf.int32), 1,
                          self.nms_thresh, self.legacy_plus_one, limit)
        return tf.cast(tf.where(kept)[:, 0], tf.int32)


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2CollectAndDistributeFpnRpnProposals(DetectionLayer):
    """Caffe2's CollectAndDistributeFpnRpnProposals: the rpn levels' proposals merged, the
    ``rpn_post_nms_topN`` best kept, and each given an FPN level.

    The rois of every rpn level are concatenated (level order), sorted by score over the whole
    batch (highest first; the first on ties) and cut to ``rpn_post_nms_topN``: the ``rois``
    output. Each roi's level is ``floor(roi_canonical_level + log2(sqrt(area) /
    roi_canonical_scale + 1e-6))`` (area with ``legacy_plus_one`` widths) clamped to
    ``[roi_min_level, roi_max_level]``; each level's output holds its rois in ``rois`` order,
    and ``rois_idx_restore`` (int32) is the permutation that takes the levels' rows,
    concatenated, back to ``rois`` order (``rois == concat(levels)[rois_idx_restore]``).

    Batch > 1: Caffe2 sorts across images and keeps the ``rpn_post_nms_topN`` best of the
    whole batch, so the images' rois interleave, and BBoxTransform and BoxWithNMSLimit after
    it read each image's rows as one contiguous block: at batch 2 Caffe2 reports detections
    under the wrong image (the ``e2e_d2_b2`` case), and an image's detections depend on the
    other images of the batch. With ``group_by_image=True`` each image keeps its own
    ``rpn_post_nms_topN`` best rois (detectron2's per-image meaning of the cap), grouped by
    batch index in score order, so each image's rows form one block downstream and every
    image gets what it gets alone. This deviates from Caffe2's rows (and so from its
    misattributed detections); with ``group_by_image=False`` (the default) the layer
    reproduces Caffe2 exactly. At batch 1 the two are the same.

    Args:
        roi_canonical_scale, roi_canonical_level, roi_min_level, roi_max_level,
            rpn_min_level, rpn_max_level, legacy_plus_one: Caffe2's arguments.
        rpn_post_nms_top_n: Caffe2's ``rpn_post_nms_topN``.
        group_by_image: order the selected rois by image (see above).
        **kwargs: base ``keras.layers.Layer`` arguments.

    Returns:
        Called on a list ``[rois_l for each rpn level] + [scores_l for each rpn level]``
        (rois ``[R_l, 5]``, scores ``[R_l]``): ``[rois, rois_fpn<min> ... rois_fpn<max>,
        rois_idx_restore]``.

    Raises:
        ValueError: a backend other than TensorFlow, a wrong number of inputs; when run
            (``InvalidArgumentError``), a level's rois and scores of other row counts, a NaN
            or inf in them, a roi of negative area (Caffe2: "Negative areas founds").

    Example:

    >>> import numpy as np
    >>> from tfinit.caffe2._detection import Caffe2CollectAndDistributeFpnRpnProposals
    >>> layer = Caffe2CollectAndDistributeFpnRpnProposals(
    ...     roi_canonical_scale=32, roi_canonical_level=3, roi_min_level=2, roi_max_level=3,
    ...     rpn_min_level=2, rpn_max_level=3)
    >>> level2 = np.array([[0, 0, 0, 9, 9], [0, 0, 0, 99, 99]], "float32")
    >>> level3 = np.array([[0, 0, 0, 31, 31]], "float32")
    >>> rois, fpn2, fpn3, restore = layer(
    ...     [level2, level3, np.array([0.9, 0.5], "float32"), np.array([0.7], "float32")])
    >>> fpn2.numpy()[:, 3].tolist(), fpn3.numpy()[:, 3].tolist(), restore.numpy().tolist()
    ([9.0], [31.0, 99.0], [0, 1, 2])
    """

    def __init__(self, roi_canonical_scale=224, roi_canonical_level=4, roi_min_level=2,
                 roi_max_level=5, rpn_min_level=2, rpn_max_level=6, rpn_post_nms_top_n=2000,
                 legacy_plus_one=True, group_by_image=False, **kwargs):
        super().__init__(**kwargs)
        self.roi_canonical_scale = int(roi_canonical_scale)
        self.roi_canonical_level = int(roi_canonical_level)
        self.roi_min_level, self.roi_max_level = int(roi_min_level), int(roi_max_level)
        self.rpn_min_level, self.rpn_max_level = int(rpn_min_level), int(rpn_max_level)
        self.rpn_post_nms_top_n = int(rpn_post_nms_top_n)
        self.legacy_plus_one = bool(legacy_plus_one)
        self.group_by_image = bool(group_by_image)

    def get_config(self):
        return {**super().get_config(), "roi_canonical_scale": self.roi_canonical_scale,
                "roi_canonical_level": self.roi_canonical_level,
                "roi_min_level": self.roi_min_level, "roi_max_level": self.roi_max_level,
                "rpn_min_level": self.rpn_min_level, "rpn_max_level": self.rpn_max_level,
                "rpn_post_nms_top_n": self.rpn_post_nms_top_n,
                "legacy_plus_one": self.legacy_plus_one, "group_by_image": self.group_by_image}

    def _levels(self):
        return range(self.roi_min_level, self.roi_max_level + 1)

    def _best_of_each_image(self, rois, order):
        """``order`` (all rows, best score first) regrouped by image, stably, and cut to the
        ``rpn_post_nms_topN`` best of each image."""
        tf = self._tf
        image = tf.gather(rois[:, 0], order)
        by_image = tf.argsort(image, stable=True)
        order, image = tf.gather(order, by_image), tf.gather(image, by_image)
        _, group = tf.unique(image)
        index = tf.range(tf.size(order))
        start = tf.math.unsorted_segment_min(index, group, tf.size(order))  # images <= rows
        rank = index - tf.gather(start, group)
        return tf.boolean_mask(order, rank < self.rpn_post_nms_top_n)

    def compute_output_spec(self, inputs):
        rois = [keras.KerasTensor((None, 5), "float32") for _ in range(len(self._levels()) + 1)]
        return rois + [keras.KerasTensor((None,), "int32")]

    def call(self, inputs):
        tf = self._tf
        levels = self.rpn_max_level - self.rpn_min_level + 1
        if len(inputs) != 2 * levels:
            raise ValueError(f"{type(self).__name__} takes 2 x {levels} inputs (rois then "
                             f"scores of rpn levels {self.rpn_min_level}-{self.rpn_max_level})."
                             f" Received: {len(inputs)}")
        rois = [tf.convert_to_tensor(v, tf.float32) for v in inputs[:levels]]
        scores = [tf.convert_to_tensor(v, tf.float32) for v in inputs[levels:]]
        op = "CollectAndDistributeFpnRpnProposals"
        checks = []
        for k, (level_rois, level_scores) in enumerate(zip(rois, scores, strict=True)):
            level = self.rpn_min_level + k
            checks += [finite(tf, op, f"rois of rpn level {level}", level_rois),
                       finite(tf, op, f"scores of rpn level {level}", level_scores),
                       same_rows(tf, op, f"rois of rpn level {level}", level_rois,
                                 f"scores of rpn level {level}", level_scores,
                                 "one score per roi, level by level")]
        with tf.control_dependencies(checks):
            rois = tf.concat(rois, 0)
            scores = tf.concat(scores, 0)
        order = tf.argsort(scores, direction="DESCENDING", stable=True)
        if self.group_by_image:
            order = self._best_of_each_image(rois, order)
        else:
            order = order[:max(self.rpn_post_nms_top_n, 0)]
        rois = tf.gather(rois, order)
        one = f32(tf, float(self.legacy_plus_one))
        areas = (rois[:, 3] - rois[:, 1] + one) * (rois[:, 4] - rois[:, 2] + one)
        check = require(tf, areas >= 0.0, "CollectAndDistributeFpnRpnProposals: a roi has a "
                        "negative area (Caffe2: 'Negative areas founds')")
        with tf.control_dependencies([check]):
            scale = tf.sqrt(areas) / f32(tf, float(self.roi_canonical_scale))
        log2 = tf.math.log(scale + f32(tf, 1e-6)) / f32(tf, math.log(2.0))
        level = tf.floor(f32(tf, float(self.roi_canonical_level)) + log2)
        level = tf.clip_by_value(level, float(self.roi_min_level), float(self.roi_max_level))
        level = tf.cast(level, tf.int32)
        by_level = tf.argsort(level, stable=True)
        restore = tf.math.invert_permutation(tf.cast(by_level, tf.int32))
        outs = [tf.boolean_mask(rois, tf.equal(level, lvl)) for lvl in self._levels()]
        return [rois, *outs, restore]
