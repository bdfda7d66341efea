"""A Caffe2 Conv as Keras layers: padding, crop, Conv2D, subsampling, shared bias.

Two cases need another form than ``Conv2D(strides=stride, dilation_rate=dilation)`` on the
padded input; each is equivalent, to float32 rounding, to Caffe2's convolution:

* **stride and dilation both above 1**: Keras's Conv2D refuses the pair. The convolution
  runs at stride 1 (the dilation kept) and its output is subsampled every ``stride`` rows
  and columns, starting at 0: output ``i`` of Caffe2's strided convolution is output
  ``i * stride`` of the stride-1 one.
* **TensorFlow 2.21's oneDNN CPU Conv2D bug**: with 1 input channel, strides ``(1, >= 2)``
  and an output width of 1, a batch of 2 or more gives shifted rows or uninitialized
  memory (``tf.nn.conv2d`` itself; ``TF_ENABLE_ONEDNN_OPTS=0`` and JAX are right). With an
  output width of 1 the column stride is never used, so the convolution runs with stride
  ``(1, 1)`` on the padded input cropped to the kernel's width: the same single window.
  Only this pattern is changed; the tests show the raw kernel's failure beside it.

docs/caffe2-ops.md (Conv) says the same for users.
"""

import dataclasses

import keras

from tfinit.caffe2._op_args import Unsupported, padded_shape
from tfinit.caffe2._shared import conv_key, shared_operand


@dataclasses.dataclass(frozen=True)
class ConvForm:
    """How to build one Caffe2 Conv: pad, crop, convolve, subsample (each may be a no-op).

    ``pads``: Caffe2's (top, left, bottom, right) after any crop folded into the right
    pad; ``crop_right``: columns to cut after padding; ``strides``: the Conv2D's;
    ``subsample``: the strides of the 1x1 subsampling after the conv (``(1, 1)``: none);
    ``stride1_shape``: the stride-1 output ``(H, W)`` before subsampling, when there is one.
    """

    pads: tuple
    crop_right: int
    strides: tuple
    subsample: tuple
    stride1_shape: tuple = None


def onednn_pattern(channels, stride, out_width):
    """True for the oneDNN Conv2D bug's pattern: 1 input channel, strides ``(1, >= 2)``,
    an output width of 1 (the batch size is not known when converting)."""
    return channels == 1 and stride[0] == 1 and stride[1] >= 2 and out_width == 1


def conv_form(size, channels, kernel, stride, dilation, pads):
    """The :class:`ConvForm` of a Conv on an input of ``size = (H, W)`` with ``channels``
    channels, Caffe2's ``kernel``, ``stride``, ``dilation`` and (t, l, b, r) ``pads``."""
    padded = (size[0] + pads[0] + pads[2], size[1] + pads[1] + pads[3])
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True))
    out = tuple((p - s) // st + 1 for p, s, st in zip(padded, span, stride, strict=True))
    if max(stride) > 1 and max(dilation) > 1:  # Keras refuses the pair: stride 1, then subsample
        stride1 = tuple(p - s + 1 for p, s in zip(padded, span, strict=True))
        return ConvForm(tuple(pads), 0, (1, 1), tuple(stride), stride1)
    if onednn_pattern(channels, stride, out[1]):
        extra = padded[1] - span[1]  # columns past the one window
        right = pads[3] - min(extra, pads[3])  # drop padding first, then crop the input
        return ConvForm((pads[0], pads[1], pads[2], right), extra - (pads[3] - right),
                        (stride[0], 1), (1, 1))
    return ConvForm(tuple(pads), 0, tuple(stride), (1, 1))


def conv_layers(b, op, x, weights, name, window, group):
    """The Keras layers of Conv ``op`` (Builder ``b``) applied to ``x`` (NHWC).

    ``weights``: ``(kernel blob, output channels, bias blob or None)``; ``window``: Caffe2's
    ``(kernel, stride, dilation, pads)``. A bias that other ops read too is added as the
    blob's one shared weight (``_shared``). A Conv repeating an earlier one's parameters and
    arguments reuses its ``Conv2D`` layer (``b.conv_layers``).
    """
    w_blob, out_channels, bias = weights
    kernel, stride, dilation, pads = window
    form = conv_form(tuple(x.shape[1:3]), x.shape[-1], kernel, stride, dilation, pads)
    pads = form.pads
    if any(pads):
        b.check_size(op, f"its input '{op.inputs[0]}' padded", padded_shape(x.shape, pads))
        x = keras.layers.ZeroPadding2D(((pads[0], pads[2]), (pads[1], pads[3])),
                                       name=b.name(name + "_pad"))(x)
    if form.crop_right:
        x = keras.layers.Cropping2D(((0, 0), (0, form.crop_right)),
                                    name=b.name(name + "_crop"))(x)
    shared = bias in b.shared
    key = conv_key(op)
    layer = b.conv_layers.get(key)
    if layer is None:
        layer = keras.layers.Conv2D(
            out_channels, kernel, strides=form.strides, padding="valid",
            dilation_rate=dilation, groups=group, use_bias=bias is not None and not shared,
            name=name,
        )
        b.conv_layers[key] = layer
        b.routes[name] = {"kernel": w_blob}
        if bias is not None and not shared:
            b.routes[name]["bias"] = bias
    elif tuple(layer.strides) != tuple(form.strides):
        raise Unsupported(f"Conv repeating the parameters of layer '{layer.name}' on an "
                          f"input that needs strides {form.strides} instead of "
                          f"{tuple(layer.strides)} (the oneDNN workaround)")
    if form.subsample != (1, 1):
        b.check_size(op, "its output at stride 1 (before subsampling)",
                     (None, *form.stride1_shape, out_channels))
    y = layer(x)
    if form.subsample != (1, 1):  # Keras refuses stride with dilation: subsample after
        y = keras.layers.MaxPooling2D((1, 1), strides=form.subsample,
                                      name=b.name(name + "_stride"))(y)
    if shared:
        y = shared_operand(b, "add", bias, y, (out_channels,), (out_channels,), False, name)
    return y
