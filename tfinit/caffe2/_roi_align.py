"""Caffe2's RoIAlign as a Keras layer (TensorFlow), computing what Caffe2 1.8.1 computes.

``tfinit/caffe2/_detection.py`` names it with the other four detection layers; its module
docstring states the layout rules they share (NHWC feature maps, a free first axis).
"""


import keras
import numpy as np

from tfinit.caffe2._detection_boxes import DetectionLayer, f32, finite, require


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2RoIAlign(DetectionLayer):
    """Caffe2's RoIAlign on an NHWC feature map.

    For roi ``[b,] x1, y1, x2, y2`` (4 columns: image 0), the box is scaled by
    ``spatial_scale`` and, with ``aligned``, shifted by -0.5; without ``aligned`` a width or
    height under 1 becomes 1 (with ``aligned``, a negative one is an error, and a zero one
    has no sample: its features are ``0 / 0 = NaN``, as in Caffe2). Each of the
    ``pooled_h x pooled_w`` bins averages a grid of ``sampling_ratio`` x ``sampling_ratio``
    points, or (``sampling_ratio <= 0``) ``ceil(roi_h / pooled_h)`` x
    ``ceil(roi_w / pooled_w)`` points; each point is bilinear, 0 when it lies below -1 or
    past H (W), clamped to the edge otherwise. The points are sampled with
    ``tf.image.crop_and_resize``, whose normalized coordinates round differently from
    Caffe2's pixel arithmetic: on a 200-wide white-noise map the bins differ from the exact
    arithmetic by up to 1e-4 (1e-5 on a smooth map), within the shared cases' tolerance
    ``1e-4 * max(1, max|y|)``; the error grows with the map's size.

    Args:
        spatial_scale: the feature map's scale to the image (1 / stride).
        pooled_h: output height.
        pooled_w: output width.
        sampling_ratio: points per bin and axis; <= 0: adaptive.
        aligned: Detectron2's half-pixel shift (Caffe2's ``aligned``).
        **kwargs: base ``keras.layers.Layer`` arguments.

    Returns:
        Called on ``(X [N, H, W, C], rois [R, 4 or 5])``: ``[R, pooled_h, pooled_w, C]``.

    Raises:
        ValueError: on a backend other than TensorFlow; when run (``InvalidArgumentError``),
            a NaN or inf in X or the rois, a roi's batch index out of ``[0, N)``, a negative
            size with ``aligned``, or (adaptive sampling) a roi over ``pooled x (H + 2)``
            cells.

    Example:

    >>> import numpy as np
    >>> from tfinit.caffe2._detection import Caffe2RoIAlign
    >>> x = np.arange(16, dtype="float32").reshape(1, 4, 4, 1)
    >>> rois = np.array([[0, 0, 0, 2, 2]], "float32")
    >>> Caffe2RoIAlign(1.0, 1, 1, 2, False)(x, rois).numpy().ravel()
    array([5.], dtype=float32)
    """

    def __init__(self, spatial_scale=1.0, pooled_h=1, pooled_w=1, sampling_ratio=-1,
                 aligned=False, **kwargs):
        super().__init__(**kwargs)
        self.spatial_scale = float(spatial_scale)
        self.pooled_h, self.pooled_w = int(pooled_h), int(pooled_w)
        self.sampling_ratio = int(sampling_ratio)
        self.aligned = bool(aligned)

    def get_config(self):
        return {**super().get_config(), "spatial_scale": self.spatial_scale,
                "pooled_h": self.pooled_h, "pooled_w": self.pooled_w,
                "sampling_ratio": self.sampling_ratio, "aligned": self.aligned}

    def compute_output_spec(self, x, rois):
        return keras.KerasTensor((None, self.pooled_h, self.pooled_w, x.shape[-1]), "float32")

    def call(self, x, rois):
        tf = self._tf
        x = tf.convert_to_tensor(x, tf.float32)
        rois = tf.convert_to_tensor(rois, tf.float32)
        with tf.control_dependencies([finite(tf, "RoIAlign", "X", x)]):
            x = tf.identity(x)  # a feature map overflowed upstream: refused, not pooled
        empty = tf.zeros([0, self.pooled_h, self.pooled_w, tf.shape(x)[3]], tf.float32)
        return tf.cond(tf.shape(rois)[0] > 0, lambda: self._pool(x, rois), lambda: empty)

    def _pool(self, x, rois):
        tf = self._tf
        n = tf.shape(x)[0]
        with tf.control_dependencies([finite(tf, "RoIAlign", "rois", rois)]):
            rois = tf.identity(rois)  # checked first: a NaN roi fails no later check
        if rois.shape[-1] == 5:
            batch = tf.cast(rois[:, 0], tf.int32)
            box = rois[:, 1:]
        else:
            batch = tf.zeros([tf.shape(rois)[0]], tf.int32)
            box = rois
        checks = [require(tf, batch >= 0, "RoIAlign: a roi's batch index is negative"),
                  require(tf, batch < n, "RoIAlign: a roi's batch index is past the batch of "
                          "X (input `rois` column 0 must be below X's images)")]
        scale = f32(tf, self.spatial_scale)
        offset = f32(tf, 0.5 if self.aligned else 0.0)
        x1, y1, x2, y2 = (box[:, k] * scale - offset for k in range(4))
        roi_w, roi_h = x2 - x1, y2 - y1
        if self.aligned:
            checks.append(require(tf, tf.minimum(roi_w, roi_h) >= 0.0, "RoIAlign (aligned=1): "
                                  "ROIs in ROIAlign do not have non-negative size"))
        else:
            roi_w, roi_h = tf.maximum(roi_w, 1.0), tf.maximum(roi_h, 1.0)
        bin_h = roi_h / float(self.pooled_h)
        bin_w = roi_w / float(self.pooled_w)
        if self.sampling_ratio > 0:
            grid_h = tf.fill(tf.shape(bin_h), self.sampling_ratio)
            grid_w = grid_h
        else:
            grid_h, grid_w = tf.math.ceil(bin_h), tf.math.ceil(bin_w)
            dims = tf.cast(tf.shape(x)[1:3] + 2, tf.float32)
            checks.append(require(
                tf, (grid_h <= dims[0]) & (grid_w <= dims[1]),
                f"RoIAlign (sampling_ratio <= 0, adaptive): a roi may span at most pooled_h x "
                f"(H + 2) by pooled_w x (W + 2) cells of X after spatial_scale (pooled "
                f"{self.pooled_h} x {self.pooled_w}); a larger one samples more points per bin "
                f"than X has and can exhaust memory: clip the rois to the image"))
            with tf.control_dependencies(checks[-1:]):
                grid_h = tf.cast(grid_h, tf.int32)
                grid_w = tf.cast(grid_w, tf.int32)
        with tf.control_dependencies(checks):
            return self._sample(x, batch, y1, x1, bin_h, bin_w, grid_h, grid_w)

    def _sample(self, x, batch, y1, x1, bin_h, bin_w, grid_h, grid_w):
        """The bins' averages of their grid points, one ``crop_and_resize`` per grid size.

        Caffe2's points of one roi are evenly spaced (``start + (k + 0.5) * bin / grid``),
        so ``tf.image.crop_and_resize`` samples them all, given the first and last point.
        When a point lies outside the map, the map is padded by one edge copy per side: a
        point in ``[-1, 0]`` or ``[size - 1, size]`` then reads the edge, as Caffe2 clamps
        it, and one past ``-1`` or ``size`` reads crop_and_resize's 0, as Caffe2 gives 0. A
        roi with no point (a zero size with ``aligned`` and adaptive sampling) is
        ``0 / 0``: NaN, as in Caffe2. With a fixed ``sampling_ratio`` every roi has the same
        grid: one ``crop_and_resize`` and an average pool, no loop.
        """
        tf = self._tf
        ph, pw = self.pooled_h, self.pooled_w
        c = tf.shape(x)[3]
        gh1 = tf.maximum(grid_h, 1)
        gw1 = tf.maximum(grid_w, 1)
        step_h = bin_h / tf.cast(gh1, tf.float32)
        step_w = bin_w / tf.cast(gw1, tf.float32)
        top = y1 + 0.5 * step_h
        left = x1 + 0.5 * step_w
        bottom = top + tf.cast(ph * gh1 - 1, tf.float32) * step_h
        right = left + tf.cast(pw * gw1 - 1, tf.float32) * step_w
        last = tf.cast(tf.shape(x)[1:3] - 1, tf.float32)
        inside = tf.reduce_all((tf.minimum(top, bottom) >= 0.0) & (tf.minimum(left, right) >= 0.0)
                               & (tf.maximum(top, bottom) <= last[0])
                               & (tf.maximum(left, right) <= last[1]))

        def padded():  # one edge copy per side
            out = tf.concat([x[:, :1], x, x[:, -1:]], axis=1)
            return tf.concat([out[:, :, :1], out, out[:, :, -1:]], axis=2)

        # the map is copied only when a point needs its edge rule
        source = tf.cond(inside, lambda: x, padded)
        shift = tf.where(inside, 0.0, 1.0)
        size = tf.cast(tf.shape(source)[1:3] - 1, tf.float32)  # normalized coordinate 1
        boxes = tf.stack([(top + shift) / size[0], (left + shift) / size[1],
                          (bottom + shift) / size[0], (right + shift) / size[1]], axis=1)

        if self.sampling_ratio > 0:
            g = self.sampling_ratio
            crops = tf.image.crop_and_resize(source, boxes, batch, (ph * g, pw * g))
            return tf.nn.avg_pool2d(crops, (g, g), (g, g), "VALID")

        key = grid_h * (tf.reduce_max(grid_w) + 1) + grid_w
        sizes, group = tf.unique(key)
        r = tf.shape(batch)[0]

        def one_size(k, values, rows):
            members = tf.cast(tf.where(tf.equal(group, k))[:, 0], tf.int32)
            gh = tf.gather(gh1, members[0])
            gw = tf.gather(gw1, members[0])
            crops = tf.image.crop_and_resize(source, tf.gather(boxes, members),
                                             tf.gather(batch, members),
                                             tf.stack([ph * gh, pw * gw]))
            # the grid sums, one axis at a time (one 6-D reduce_sum over axes 2 and 4 is
            # about 9x slower on CPU)
            rows_sum = tf.reduce_sum(tf.reshape(crops, [-1, ph, gh, pw * gw * c]), axis=2)
            sums = tf.reduce_sum(tf.reshape(rows_sum, [-1, ph, pw, gw, c]), axis=3)
            count = tf.cast(tf.gather(grid_h, members[0]) * tf.gather(grid_w, members[0]),
                            tf.float32)
            pooled = sums / tf.maximum(count, 1.0)
            pooled = tf.where(count > 0, pooled, np.float32("nan"))  # Caffe2's 0 / 0
            return k + 1, values.write(k, pooled), rows.write(k, members)

        _, values, rows = tf.while_loop(
            lambda k, *_: k < tf.size(sizes), one_size,
            (tf.constant(0), tf.TensorArray(tf.float32, size=tf.size(sizes), infer_shape=False,
                                            element_shape=[None, ph, pw, None]),
             tf.TensorArray(tf.int32, size=tf.size(sizes), infer_shape=False,
                            element_shape=[None])))
        return tf.scatter_nd(rows.concat()[:, None], values.concat(), [r, ph, pw, c])
