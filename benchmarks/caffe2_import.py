"""Full-size Caffe2 nets: ``load_init_net`` and ``to_keras`` on model-zoo-sized files.

A GivenTensorFill init net with the parameter shapes of VGG-19 (143.7 M float32 values,
718 MB on disk, as the Caffe2 model zoo's) or ResNet-50 (25.6 M, 128 MB) is written with
random values, streamed to disk (never held whole in memory), then:

* ``load_init_net`` vs a bare protobuf parse of the same file (target <= 1.3x);
* the peak memory of ``load_init_net`` in a fresh process vs the floor of the file's bytes
  plus the float32 values (target: peak growth <= file bytes + 2x the values);
* ``to_keras`` end to end (VGG-19 predict net) vs ``load_init_net`` + the same Keras layers
  built by hand + ``set_weights`` (target <= 1.5x).

``--quick``/``--smoke`` shrink every width (channels, FC sizes, the image) so the suite and
its tests run in seconds; the full-size figures are measured by hand (``python -m
benchmarks --only caffe2_import``, about 2-3 minutes and 4 GB of memory) and written in the
README.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._timing import compare

# (name, full width divisor, image size): widths are divided by it in smaller modes
SIZES = {"full": (1, 224, 3), "quick": (16, 32, 2), "smoke": (64, 32, 2)}


def vgg19_shapes(div=1, image=224):
    """``[(blob, shape)]`` of VGG-19 in Caffe2 layout (conv OIHW, FC [out, in])."""
    shapes, cin = [], 3
    for stage, (width, convs) in enumerate([(64, 2), (128, 2), (256, 4), (512, 4), (512, 4)]):
        width = max(width // div, 1)
        for k in range(convs):
            name = f"conv{stage + 1}_{k + 1}"
            shapes += [(f"{name}_w", (width, cin, 3, 3)), (f"{name}_b", (width,))]
            cin = width
    side = image // 32
    hidden = max(4096 // div, 1)
    fin = cin * side * side
    for name, (out, inp) in [("fc6", (hidden, fin)), ("fc7", (hidden, hidden)),
                             ("fc8", (max(1000 // div, 1), hidden))]:
        shapes += [(f"{name}_w", (out, inp)), (f"{name}_b", (out,))]
    return shapes


def resnet50_shapes(div=1):
    """``[(blob, shape)]`` of ResNet-50 as Caffe2's model zoo has it (conv weights without
    bias, SpatialBN ``_s, _b, _rm, _riv``, FC)."""
    shapes = []

    def conv_bn(name, out, inp, k):
        shapes.append((f"{name}_w", (out, inp, k, k)))
        shapes.extend((f"{name}_bn_{s}", (out,)) for s in ("s", "b", "rm", "riv"))

    stem = max(64 // div, 1)
    conv_bn("conv1", stem, 3, 7)
    cin = stem
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        width = max(width // div, 1)
        for block in range(blocks):
            name = f"res{stage + 2}_{block}"
            conv_bn(f"{name}_branch2a", width, cin, 1)
            conv_bn(f"{name}_branch2b", width, width, 3)
            conv_bn(f"{name}_branch2c", 4 * width, width, 1)
            if block == 0:
                conv_bn(f"{name}_branch1", 4 * width, cin, 1)
            cin = 4 * width
    classes = max(1000 // div, 1)
    shapes += [("pred_w", (classes, cin)), ("pred_b", (classes,))]
    return shapes


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def given_tensor_fill_bytes(blob, values):
    """One serialized ``GivenTensorFill`` OperatorDef, as Caffe2's exporter writes it:
    ``shape`` (ints) and ``values`` (unpacked floats, 5 bytes each)."""
    shape_arg = _field(1, b"shape") + b"".join(
        _varint(6 << 3) + _varint(d) for d in values.shape)
    from tfinit.caffe2._large_floats import FLOAT_ELEMENT, FLOAT_TAG

    elements = np.empty(values.size, FLOAT_ELEMENT)
    elements["tag"] = FLOAT_TAG
    elements["value"] = values.reshape(-1)
    values_arg = _field(1, b"values") + elements.tobytes()
    return (_field(2, blob.encode()) + _field(4, b"GivenTensorFill")
            + _field(5, shape_arg) + _field(5, values_arg))


def write_init_net(path, shapes, seed=0):
    """Write a GivenTensorFill init net of random values (one op at a time); its bytes."""
    rng = np.random.default_rng(seed)
    with open(path, "wb") as handle:
        handle.write(_field(1, b"init"))
        for blob, shape in shapes:
            values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.01)
            handle.write(_field(2, given_tensor_fill_bytes(blob, values)))
    return os.path.getsize(path)


def vgg19_predict_net(shapes):
    """VGG-19's predict net (NCHW convs, ceil-free 2x2 max pools, FC head, softmax)."""
    from tfinit.caffe2 import NetDef, Operator

    ops, x = [], "data"
    convs = [name[:-2] for name, _ in shapes if name.startswith("conv") and name.endswith("_w")]
    for name in convs:
        ops.append(Operator("Conv", (x, f"{name}_w", f"{name}_b"), (name,),
                            {"kernel": 3, "pad": 1, "stride": 1, "order": "NCHW"}))
        ops.append(Operator("Relu", (name,), (name,)))
        x = name
        if name.endswith(("1_2", "2_2", "3_4", "4_4", "5_4")):
            pool = f"pool{name[4]}"
            ops.append(Operator("MaxPool", (x,), (pool,),
                                {"kernel": 2, "stride": 2, "order": "NCHW"}))
            x = pool
    for name in ("fc6", "fc7", "fc8"):
        ops.append(Operator("FC", (x, f"{name}_w", f"{name}_b"), (name,)))
        x = name
        if name != "fc8":
            ops.append(Operator("Relu", (x,), (x,)))
    ops.append(Operator("Softmax", (x,), ("prob",)))
    return NetDef(name="vgg19", ops=ops, external_input=["data"], external_output=["prob"])


def vgg19_by_hand(shapes, image):
    """The same model as ``to_keras`` builds, written with Keras layers (NCHW in)."""
    import keras

    widths = {name[:-2]: shape for name, shape in shapes}
    inputs = keras.Input((3, image, image), name="data")
    x = keras.layers.Permute((2, 3, 1))(inputs)
    for name, shape in widths.items():
        if name.startswith("conv"):
            x = keras.layers.Conv2D(shape[0], 3, padding="same", activation="relu",
                                    name=name)(x)
            if name.endswith(("1_2", "2_2", "3_4", "4_4", "5_4")):
                x = keras.layers.MaxPooling2D(2, 2)(x)
    x = keras.layers.Permute((3, 1, 2))(x)  # Caffe2 flattens C, H, W
    x = keras.layers.Flatten()(x)
    for name in ("fc6", "fc7", "fc8"):
        x = keras.layers.Dense(widths[name][0], activation="relu" if name != "fc8" else None,
                               name=name)(x)
    return keras.Model(inputs, keras.layers.Softmax()(x))


def set_weights_by_hand(model, params):
    for layer in model.layers:
        if layer.name + "_w" in params:
            w = params[layer.name + "_w"]
            kernel = w.transpose(2, 3, 1, 0) if w.ndim == 4 else w.T
            layer.set_weights([kernel, params[layer.name + "_b"]])


def _peak_child(path):
    """Peak memory of ``load_init_net(path)`` in a fresh process (``benchmarks._caffe2_peak``)."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks._caffe2_peak", str(path)],
        check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _memory_row(label, path, file_bytes, values):
    m = _peak_child(path)
    grown = m["peak_after"] - m["rss_before"]
    floor = file_bytes + 4 * values
    return {
        "name": f"{label}: load_init_net peak memory",
        "file_mb": round(file_bytes / 1e6, 1),
        "values_mb": round(4 * values / 1e6, 1),
        "peak_growth_mb": round(grown / 1e6, 1),
        "floor_mb (file + values)": round(floor / 1e6, 1),
        "peak / floor": round(grown / floor, 3),
        "target_mb (file + 2x values)": round((file_bytes + 8 * values) / 1e6, 1),
        "within_target": grown <= file_bytes + 8 * values,
        "seconds": round(m["seconds"], 2),
    }


def _load_rows(label, path, shapes, repeats):
    """``load_init_net`` vs a bare protobuf parse of the file, and its peak memory."""
    from tfinit.caffe2 import load_init_net
    from tfinit.caffe2._netdef import _PB

    file_bytes = write_init_net(path, shapes)
    values = sum(int(np.prod(s)) for _, s in shapes)

    def bare_parse():
        net = _PB["NetDef"]()
        net.ParseFromString(path.read_bytes())
        return net

    return [compare(f"{label}: load_init_net vs bare protobuf parse",
                    lambda: load_init_net(path), bare_parse, repeats, warmup=0, target=1.3,
                    params_m=round(values / 1e6, 2), file_mb=round(file_bytes / 1e6, 1)),
            _memory_row(label, path, file_bytes, values)]


def _to_keras_row(label, path, shapes, image, repeats):
    """``to_keras`` of VGG-19 vs ``load_init_net`` + the Keras layers by hand."""
    import keras

    from tfinit.caffe2 import load_init_net, to_keras

    predict = vgg19_predict_net(shapes)

    def ours():
        return to_keras(predict, path, (3, image, image))

    def by_hand():
        params = load_init_net(path)
        model = vgg19_by_hand(shapes, image)
        set_weights_by_hand(model, params)
        return model

    x = np.random.default_rng(0).standard_normal((1, 3, image, image), dtype=np.float32)
    agree = float(np.abs(np.asarray(ours()(x)) - np.asarray(by_hand()(x))).max())
    keras.backend.clear_session()
    row = compare(f"{label}: to_keras vs load_init_net + Keras layers by hand + set_weights",
                  ours, by_hand, repeats, warmup=0, target=1.5, outputs_max_abs_diff=agree)
    keras.backend.clear_session()
    return row


def run(mode):
    """Rows for the benchmark table (``mode``: full, quick, smoke)."""
    div, image, repeats = SIZES[mode]
    suffix = "" if div == 1 else f" /{div}"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "init_net.pb"
        shapes = vgg19_shapes(div, image)
        rows += _load_rows("VGG-19" + suffix, path, shapes, repeats)
        rows.append(_to_keras_row("VGG-19" + suffix, path, shapes, image, repeats))
        rows += _load_rows("ResNet-50" + suffix, path, resnet50_shapes(div), repeats)
    return rows


if __name__ == "__main__":
    start = time.perf_counter()
    for row in run(sys.argv[1] if len(sys.argv) > 1 else "quick"):
        print(row)
    print(f"{time.perf_counter() - start:.1f} s")
