"""Caffe2 nets of several ops, run in the real Caffe2: the multi-op part of the differential
test (tests/test_caffe2_opcases.py; the single-op part is ../caffe2_opcases/).

Usage (Python 3.8 venv with torch==1.8.1, numpy==1.21.6, protobuf==3.20.3, as in
shared/reference/caffe2/opcases/README.md):
    c2env/bin/python gen_netcases.py --out DIR [--seed 11]

Writes DIR/cases.json and per case <id>_predict_net.pb, <id>_init_net.pb, <id>.npz (input/,
blob/ arrays), the format of the single-op cases. The ops run one by one
(RunOperatorOnce), so a net Caffe2 refuses records which op refused it (`failed_op`,
`failed_index`). `input_format` cases reuse a net and say how to_keras is called.
"""

import argparse
import json
import os
import random
import shutil
import sys

import numpy as np
from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace

workspace.GlobalInit(["caffe2", "--caffe2_log_level=3"])
P = argparse.ArgumentParser()
P.add_argument("--out", required=True)
P.add_argument("--seed", type=int, default=11)
ARGS = P.parse_args()
R = random.Random(ARGS.seed)
NR = np.random.RandomState(ARGS.seed)
CASES = []


def randn(*shape):
    return NR.standard_normal(shape).astype(np.float32)


def fill_op(name, value):
    value = np.asarray(value)
    if value.dtype == np.float32:
        return core.CreateOperator("GivenTensorFill", [], [name], shape=list(value.shape),
                                   values=[float(v) for v in value.reshape(-1)])
    return core.CreateOperator("GivenTensorInt64Fill", [], [name], shape=list(value.shape),
                               values=[int(v) for v in value.reshape(-1)])


def net_case(family, ops, data, params, outputs, order="NCHW", note=""):
    """ops: [(type, inputs, outputs, args)]."""
    cid = f"net{len(CASES):02d}_{family}"
    init = caffe2_pb2.NetDef()
    init.name = cid + "_init"
    init.op.extend([fill_op(b, v) for b, v in params.items()])
    init.external_output.extend(list(params))
    predict = caffe2_pb2.NetDef()
    predict.name = cid
    predict.op.extend([core.CreateOperator(t, i, o, **a) for t, i, o, a in ops])
    predict.external_input.extend([*data, *params])
    predict.external_output.extend(outputs)
    workspace.ResetWorkspace()
    for b, v in data.items():
        workspace.FeedBlob(b, v)
    workspace.RunNetOnce(init)
    status, error, failed = "ok", "", None
    for k, op in enumerate(predict.op):
        try:
            workspace.RunOperatorOnce(op)
        except Exception as e:  # noqa: BLE001
            status, error, failed = "rejected", str(e).split("\nframe #")[0][:400], k
            break
    arrays = {f"input/{b}": v for b, v in data.items()}
    if status == "ok":
        for b in outputs:
            arrays[f"blob/{b}"] = workspace.FetchBlob(b)
    np.savez_compressed(os.path.join(ARGS.out, cid + ".npz"), **arrays)
    for name, net in (("predict", predict), ("init", init)):
        with open(os.path.join(ARGS.out, f"{cid}_{name}_net.pb"), "wb") as f:
            f.write(net.SerializeToString())
    CASES.append({
        "id": cid, "op": ops[failed][0] if failed is not None else "net",
        "ops": [t for t, *_ in ops], "args": {}, "data": list(data), "params": list(params),
        "outputs": list(outputs), "order": order, "caffe2": status, "caffe2_error": error,
        "failed_index": failed, "note": note,
    })
    return cid


def conv_params(prefix, o, i, kh, kw, order):
    w = randn(o, i, kh, kw) if order == "NCHW" else randn(o, kh, kw, i)
    return {f"{prefix}_w": w * 0.5, f"{prefix}_b": randn(o)}


def fixed():
    # Conv in NHWC feeding an FC: the FC weight's columns are in H, W, C order
    p = {**conv_params("c", 4, 3, 3, 3, "NHWC"), "fc_w": randn(5, 3 * 3 * 4), "fc_b": randn(5)}
    net_case("conv_nhwc_fc", [
        ("Conv", ["X", "c_w", "c_b"], ["c"], {"kernel": 3, "order": "NHWC"}),
        ("Relu", ["c"], ["r"], {}),
        ("FC", ["r", "fc_w", "fc_b"], ["Y"], {}),
    ], {"X": randn(2, 5, 5, 3)}, p, ["Y"], order="NHWC")
    # the same in NCHW: columns in C, H, W order
    p = {**conv_params("c", 4, 3, 3, 3, "NCHW"), "fc_w": randn(5, 2 * 2 * 4), "fc_b": randn(5)}
    net_case("conv_pool_fc_nchw", [
        ("Conv", ["X", "c_w", "c_b"], ["c"], {"kernel": 3, "pad": 1}),
        ("MaxPool", ["c"], ["p"], {"kernel": 3, "stride": 2, "legacy_pad": 3}),
        ("FC", ["p", "fc_w", "fc_b"], ["Y"], {}),
        ("Softmax", ["Y"], ["prob"], {}),
    ], {"X": randn(2, 3, 4, 4)}, p, ["Y", "prob"])
    # Caffe's conv / batch norm / scale / relu / pool block
    c = 6
    p = {**conv_params("c", c, 3, 3, 3, "NCHW"), "bn_s": randn(c), "bn_b": randn(c),
         "bn_rm": randn(c), "bn_riv": NR.uniform(0.5, 2, c).astype(np.float32),
         "sc": randn(c), "sh": randn(c), "fc_w": randn(3, c), "fc_b": randn(3)}
    for order in ("NCHW", "NHWC"):
        pp = dict(p)
        if order == "NHWC":
            pp["c_w"] = p["c_w"].transpose(0, 2, 3, 1).copy()
        axis = 1 if order == "NCHW" else 3
        x = randn(2, 3, 7, 7) if order == "NCHW" else randn(2, 7, 7, 3)
        net_case(f"bn_scale_block_{order.lower()}", [
            ("Conv", ["X", "c_w", "c_b"], ["c"], {"kernel": 3, "stride": 2, "pad": 1,
                                                  "order": order}),
            ("SpatialBN", ["c", "bn_s", "bn_b", "bn_rm", "bn_riv"], ["c"],
             {"is_test": 1, "order": order}),
            ("Mul", ["c", "sc"], ["c"], {"broadcast": 1, "axis": axis}),
            ("Add", ["c", "sh"], ["c"], {"broadcast": 1, "axis": axis}),
            ("Relu", ["c"], ["c"], {}),
            ("AveragePool", ["c"], ["g"], {"global_pooling": 1, "order": order}),
            ("FC", ["g", "fc_w", "fc_b"], ["Y"], {}),
        ], {"X": x}, pp, ["c", "Y"], order=order)
    # branches: two convs, Concat, LRN, ChannelShuffle, Split, Sum, Sigmoid/Tanh
    p = {**conv_params("a", 4, 2, 1, 1, "NCHW"), **conv_params("b", 4, 2, 3, 3, "NCHW")}
    net_case("branches", [
        ("Conv", ["X", "a_w", "a_b"], ["a"], {"kernel": 1}),
        ("Conv", ["X", "b_w", "b_b"], ["b"], {"kernel_h": 3, "kernel_w": 3, "pad": 1}),
        ("Tanh", ["a"], ["a"], {}),
        ("Sigmoid", ["b"], ["b"], {}),
        ("Concat", ["a", "b"], ["cat", "cat_info"], {"axis": 1}),
        ("LRN", ["cat"], ["n"], {"size": 3, "alpha": 0.5, "beta": 0.75, "bias": 1.0}),
        ("ChannelShuffle", ["n"], ["s"], {"group": 2}),
        ("Split", ["s"], ["s0", "s1"], {"axis": 1, "split": [3, 5]}),
        ("MaxPool", ["s0"], ["m0"], {"kernel": 1}),
        ("Sum", ["a", "b"], ["ab"], {}),
        ("Dropout", ["ab"], ["d"], {"is_test": 1}),
    ], {"X": randn(2, 2, 5, 6)}, p, ["cat", "s1", "m0", "d"])
    # Reshape and Flatten of an NCHW blob feeding FCs
    p = {**conv_params("c", 3, 1, 2, 2, "NCHW"), "fc_w": randn(2, 12), "fc_b": randn(2),
         "f2_w": randn(2, 4), "f2_b": randn(2)}
    net_case("reshape_flatten", [
        ("Conv", ["X", "c_w", "c_b"], ["c"], {"kernel": 2}),
        ("Flatten", ["c"], ["f"], {}),
        ("FC", ["f", "fc_w", "fc_b"], ["y1"], {}),
        ("Reshape", ["c"], ["r", "old"], {"shape": [0, 3, -1]}),
        ("FC", ["r", "f2_w", "f2_b"], ["y2"], {"axis": 2}),
    ], {"X": randn(2, 1, 3, 3)}, p, ["y1", "y2", "old"])
    # legacy broadcast of a data input at axis 0 ([N, C] scaling [N, C, H, W])
    net_case("mul_data_axis0", [
        ("Relu", ["X"], ["r"], {}),
        ("Mul", ["r", "S"], ["Y"], {"broadcast": 1, "axis": 0}),
    ], {"X": randn(3, 4, 2, 2), "S": randn(3, 4)}, {}, ["Y"])
    # a net Caffe2 refuses at its second op: pad >= kernel
    p = conv_params("c", 2, 1, 1, 1, "NCHW")
    net_case("refused_second_op", [
        ("Conv", ["X", "c_w", "c_b"], ["c"], {"kernel": 1}),
        ("MaxPool", ["c"], ["Y"], {"kernel": 2, "pad": 2}),
    ], {"X": randn(1, 1, 4, 4)}, p, ["Y"])
    p = conv_params("c", 2, 1, 3, 3, "NCHW")
    net_case("refused_kernel_gt_input", [
        ("Relu", ["X"], ["r"], {}),
        ("Conv", ["r", "c_w", "c_b"], ["Y"], {"kernel": 3, "pad_t": 1}),
    ], {"X": randn(1, 1, 2, 2)}, p, ["Y"])


def random_chain(k):
    order = R.choice(["NCHW", "NHWC"])
    c, h, w = R.randint(1, 4), R.randint(4, 12), R.randint(4, 12)
    x = randn(R.randint(1, 3), c, h, w)
    if order == "NHWC":
        x = x.transpose(0, 2, 3, 1).copy()
    ops, params, blob = [], {}, "X"
    for j in range(R.randint(2, 5)):
        kind = R.choice(["conv", "conv", "pool", "bn", "relu", "scale"])
        out = f"b{j}"
        if kind == "conv":
            o, kh, kw = R.randint(1, 5), R.randint(1, 3), R.randint(1, 3)
            g = R.choice([1, 1, c]) if c % 1 == 0 else 1
            if o % g:
                g = 1
            params.update(conv_params(out, o, c // g, kh, kw, order))
            args = {"order": order, "group": g}
            args.update(R.choice([{"kernel_h": kh, "kernel_w": kw}, {"kernels": [kh, kw]}]))
            args.update(R.choice([{}, {"stride": R.randint(1, 2)},
                                  {"stride_h": R.randint(1, 2), "stride_w": R.randint(1, 2)}]))
            args.update(R.choice([{}, {"pad": R.randint(0, 2)}, {"pad_t": 1},
                                  {"pads": [R.randint(0, 2) for _ in range(4)]}]))
            ops.append(("Conv", [blob, f"{out}_w", f"{out}_b"], [out], args))
            c = o
        elif kind == "pool":
            args = {"order": order, "kernel": R.randint(1, 3), "stride": R.randint(1, 2)}
            args.update(R.choice([{}, {"pad": R.randint(0, 1)}, {"legacy_pad": 3},
                                  {"pad_t": 1, "pad_l": 0, "pad_b": 1, "pad_r": 1}]))
            ops.append((R.choice(["MaxPool", "AveragePool"]), [blob], [out], args))
        elif kind == "bn":
            params.update({f"{out}_s": randn(c), f"{out}_b": randn(c), f"{out}_rm": randn(c),
                           f"{out}_riv": NR.uniform(0.5, 2, c).astype(np.float32)})
            ops.append(("SpatialBN", [blob] + [f"{out}_{s}" for s in ("s", "b", "rm", "riv")],
                        [out], {"is_test": 1, "order": order}))
        elif kind == "scale":
            params[f"{out}_s"] = randn(c)
            ops.append((R.choice(["Mul", "Add"]), [blob, f"{out}_s"], [out],
                        {"broadcast": 1, "axis_str": "C", "order": order}))
        else:
            ops.append(("Relu", [blob], [out], {}))
        blob = out
    net_case(f"chain_{order.lower()}", ops, {"X": x}, params, [blob], order=order)


def main():
    if os.path.isdir(ARGS.out):
        shutil.rmtree(ARGS.out)
    os.makedirs(ARGS.out)
    fixed()
    for k in range(30):
        random_chain(k)
    extra = []
    for case in CASES:  # the same nets through to_keras's other interface layout
        if case["id"].startswith(("net00_", "net01_", "net02_", "net03_", "net04_")):
            other = "channels_first" if case["order"] == "NHWC" else "channels_last"
            extra.append({**case, "id": case["id"] + "__" + other, "input_format": other,
                          "files": case["id"]})
    meta = {"generator": "gen_netcases.py", "seed": ARGS.seed,
            "environment": {"python": sys.version.split()[0], "numpy": np.__version__,
                            "torch": __import__("torch").__version__},
            "cases": CASES + extra}
    with open(os.path.join(ARGS.out, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(len(CASES) + len(extra), "cases;", sum(c["caffe2"] == "ok" for c in CASES), "ran")


if __name__ == "__main__":
    main()
