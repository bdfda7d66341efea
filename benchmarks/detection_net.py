"""The toy FPN Mask R-CNN at ResNet-50-FPN widths: the converted model, split into its
backbone and its heads with the detection ops, and the backbone beside the same layers
written directly in Keras.

``python -m benchmarks.detection_net [--quick | --smoke]`` prints a Markdown table (ms per
forward pass, medians of interleaved runs inside ``tf.function``). The net is the structure
of ``tests/caffe2/data/detcases/e2e_v1_b1`` (Detectron style, made by the real Caffe2) with
every 8-channel blob widened to ``channels`` (256 in full, as ResNet-50-FPN's FPN), the FC
head to 1024, the image to ``side`` x ``side`` (800 in full) and Detectron's FPN test
settings (1000 proposals per level and after Collect, 100 detections); random weights
(He-scaled, fixed seed), anchors scaled to the image. Rows:

- ``backbone``: ``to_keras(..., outputs=[the FPN maps and the RPN head's logits and deltas],
  input_format="channels_last")`` beside the same layers written in Keras (``Conv2D``,
  ``Rescaling`` for AffineChannel, ``MaxPooling2D``, ``UpSampling2D``, ``Add``) on the same
  NHWC input with the same weights (goal: within 1.2x);
- ``whole net``: the converted model to its detections and masks beside its own backbone
  (the difference is the proposals, RoIAlign, box and mask heads, BBoxTransform and NMS).
"""

import dataclasses
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

NET = Path(__file__).resolve().parents[1] / "tests" / "caffe2" / "data" / "detcases"
SIZES = {  # channels, FC width, image side, repeats
    "full": (256, 1024, 800, 7),
    "quick": (64, 256, 256, 5),
    "smoke": (8, 32, 64, 2),
}
BACKBONE = ["fpn_res2_sum", "fpn_res3_sum", "rpn_cls_logits_fpn2", "rpn_bbox_pred_fpn2",
            "rpn_cls_logits_fpn3", "rpn_bbox_pred_fpn3"]
DETECTRON_TEST = {"GenerateProposals": {"pre_nms_topN": 1000, "post_nms_topN": 1000},
                  "CollectAndDistributeFpnRpnProposals": {"rpn_post_nms_topN": 1000},
                  "BoxWithNMSLimit": {"detections_per_im": 100}}


def wide_net(channels, hidden, side):
    """The toy net's predict net (Detectron's test settings) and widened parameters."""
    from tfinit.caffe2 import load_init_net, read_netdef

    net = read_netdef(NET / "e2e_v1_b1_predict_net.pb")
    net.ops = [dataclasses.replace(op, args={**op.args, **DETECTRON_TEST.get(op.type, {})})
               for op in net.ops]
    toy = load_init_net(NET / "e2e_v1_b1_init_net.pb")
    sizes = {8: channels, 32: hidden, 128: channels * 16}  # fc6 reads C x 4 x 4
    rng = np.random.default_rng(0)
    params = {}
    for blob, value in toy.items():
        if blob.startswith("anchor"):
            params[blob] = value * np.float32(side / 32)
            continue
        shape = tuple(sizes.get(d, d) for d in value.shape)
        if blob.endswith("_b"):
            params[blob] = np.zeros(shape, np.float32)
        elif blob.endswith("_s"):  # AffineChannel scale
            params[blob] = np.ones(shape, np.float32)
        else:
            fan_in = int(np.prod(shape[1:]))
            params[blob] = (rng.normal(size=shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    return net, params


def keras_backbone(params, side):
    """The backbone and RPN head of the net written with Keras's own layers (NHWC)."""
    import keras

    def conv(x, blob, stride=1, pad=1):
        w = params[f"{blob}_w"]
        if pad:
            x = keras.layers.ZeroPadding2D(pad)(x)
        layer = keras.layers.Conv2D(w.shape[0], w.shape[2:], strides=stride,
                                    use_bias=f"{blob}_b" in params)
        y = layer(x)
        kernel = [w.transpose(2, 3, 1, 0)] + ([params[f"{blob}_b"]] if layer.use_bias else [])
        layer.set_weights(kernel)
        return y

    def affine(x, prefix):
        return keras.layers.Rescaling(params[f"{prefix}_s"], params[f"{prefix}_b"])(x)

    relu = keras.layers.ReLU
    data = keras.Input((side, side, 3))
    x = relu()(affine(conv(data, "conv1"), "res_conv1_bn"))
    x = keras.layers.MaxPooling2D(2)(x)
    res2 = relu()(affine(conv(x, "res2_conv", 2), "res2_bn"))
    res3 = relu()(affine(conv(res2, "res3_conv", 2), "res3_bn"))
    inner3 = conv(res3, "fpn_inner_res3_sum", pad=0)
    inner2 = keras.layers.Add()([conv(res2, "fpn_inner_res2_sum_lateral", pad=0),
                                 keras.layers.UpSampling2D(2)(inner3)])
    outputs = [conv(inner2, "fpn_res2_sum"), conv(inner3, "fpn_res3_sum")]
    for level in list(outputs):  # in BACKBONE's order
        head = relu()(conv(level, "conv_rpn_fpn2"))
        outputs += [conv(head, "rpn_cls_logits_fpn2", pad=0),
                    conv(head, "rpn_bbox_pred_fpn2", pad=0)]
    return keras.Model(data, outputs)


def run(mode="full"):
    import tensorflow as tf

    from benchmarks._timing import compare
    from tfinit.caffe2 import to_keras

    channels, hidden, side, repeats = SIZES[mode]
    net, params = wide_net(channels, hidden, side)
    shapes = {"data": (3, side, side), "im_info": (3,)}
    image = np.random.default_rng(1).normal(size=(1, 3, side, side)).astype(np.float32)
    info = np.array([[side, side, 1.0]], np.float32)
    whole = to_keras(net, params, shapes, outputs=["score_nms", "bbox_nms", "class_nms",
                                                   "mask_fcn_probs"])
    # the backbone on NHWC images, as the Keras layers take them (no layout Permutes)
    backbone = to_keras(net, params, {"data": (side, side, 3), "im_info": (3,)},
                        outputs=BACKBONE, input_format="channels_last")
    by_hand = keras_backbone(params, side)
    nhwc = image.transpose(0, 2, 3, 1)
    ours = tf.function(lambda: backbone([nhwc, info]))
    theirs = tf.function(lambda: by_hand(nhwc))
    full = tf.function(lambda: whole([image, info]))
    check = max(float(np.abs(a.numpy() - b.numpy()).max())
                for a, b in zip(ours(), theirs(), strict=True))
    detections = int(full()[0].shape[0])
    what = f"{channels} channels, {side}x{side} image"  # whole net: NCHW in, as Caffe2
    row = compare(f"toy Mask R-CNN backbone + RPN head ({what}) vs the same Keras layers",
                  lambda: [y.numpy() for y in ours()], lambda: [y.numpy() for y in theirs()],
                  repeats)
    row["max_abs_difference"] = check
    net_row = compare(f"toy Mask R-CNN whole net ({what}, {detections} detections) vs its "
                      f"backbone", lambda: [y.numpy() for y in full()],
                      lambda: [y.numpy() for y in ours()], repeats)
    return [row, net_row]


def main(argv=None):
    from benchmarks._markdown import print_table_main

    return print_table_main(run, "python -m benchmarks.detection_net", __doc__.splitlines()[0],
                            argv)


if __name__ == "__main__":
    sys.exit(main())
