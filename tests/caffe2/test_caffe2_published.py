"""Caffe2 nets published by others (issue 23): Caffe's ceil-mode pooling, Scale layers as
broadcast Mul/Add with parameters, FC ``axis_w``, one refusal naming everything, and
``--check`` telling parameters from data. Ground truth: ``tests/data/caffe2_ops`` (single
ops run in real Caffe2) and numpy re-computations of the rules in docs/caffe2-ops.md."""

import json

import keras
import numpy as np
import pytest

import caffe2_nets as nets
from tfinit.caffe2 import Caffe2Broadcast, NetDef, Operator, check_forward, to_keras
from tfinit.cli import main

CASES = json.loads((nets.ops_dir() / "ops.json").read_text())["cases"]


def _case(name):
    folder = nets.ops_dir()
    ref = np.load(folder / f"{name}.npz", allow_pickle=False)
    params = {k[6:]: ref[k] for k in ref.files if k.startswith("param/")}
    return folder / f"{name}_predict_net.pb", ref, params


def _float32_tol(expected):
    """A float32 op's agreement: 1e-6 of max|y| (a few ulps of the largest value)."""
    return 1e-6 * float(np.abs(expected).max())


# ---------------------------------------------------------------- every op case of real Caffe2


def test_every_op_case_is_tested():
    assert len(CASES) == 31
    assert {c["op"] for c in CASES} == {"MaxPool", "AveragePool", "Mul", "Add", "FC"}


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_op_case_matches_real_caffe2(case):
    predict, ref, params = _case(case["case"])
    assert sorted(params) == sorted(case["params"])
    x = ref[f"input/{case['inputs'][0]}"]
    model = to_keras(predict, params, x.shape[1:])
    y, expected = np.asarray(model(x)), ref["blob/Y"]
    assert y.shape == expected.shape == tuple(case["shapes"]["blob/Y"])
    if case["op"] == "MaxPool":
        np.testing.assert_array_equal(y, expected)  # a maximum is exact
    else:
        np.testing.assert_allclose(y, expected, rtol=0, atol=_float32_tol(expected))
    # parameters of Mul/Add/FC are the model's trainable weights
    assert len(model.trainable_weights) == len(params)


@pytest.mark.parametrize("case", [c for c in CASES if "legacy3" in c["case"]],
                         ids=lambda c: c["case"])
def test_ceil_mode_pools_follow_the_documented_rule(case):
    """The numpy rule of docs/caffe2-ops.md reproduces Caffe2, so the tests' reference
    for nets of several ops is itself checked against real Caffe2."""
    _, ref, _ = _case(case["case"])
    args = case["args"]
    kernel, stride = (args["kernel"],) * 2, (args["stride"],) * 2
    pad = (args["pad_t"], args["pad_l"]) if "pad_t" in args else (args["pad"],) * 2
    mode = "max" if case["op"] == "MaxPool" else "average"
    expected = ref["blob/Y"]
    y = nets.ceil_pool(ref["input/X"], kernel, stride, pad, mode)
    np.testing.assert_allclose(y, expected, rtol=0, atol=_float32_tol(expected))


def test_ceil_mode_adds_the_row_the_floor_rule_drops():
    predict, ref, _ = _case("maxpool_legacy3_h16w16_k3s2p0")
    model = to_keras(predict, {}, (3, 16, 16))
    assert model.output_shape == (None, 3, 8, 8)  # the floor rule gives 7x7
    np.testing.assert_array_equal(np.asarray(model(ref["input/X"]))[:, :, 7, 7],
                                  ref["input/X"][:, :, 14:, 14:].max(axis=(2, 3)))


# ---------------------------------------------------------------- Scale layers: Mul / Add


def test_caffe_style_net_matches_numpy_caffe2_blob_by_blob():
    predict, params = nets.caffe_style()
    x = np.random.default_rng(0).normal(size=(2, 3, 13, 13)).astype(np.float32)
    ref = nets.caffe_style_forward(x, params)
    blobs = ["pool1", "a", "dw", "pw", "cat", "pool2", "fc", "prob"]
    model = to_keras(predict, nets.given_tensor_init_net(params).to_bytes(), (3, 13, 13),
                     outputs=blobs)
    for blob, out in zip(blobs, model(x), strict=True):
        out = np.asarray(out)
        assert out.shape == ref[blob].shape, blob
        np.testing.assert_allclose(out, ref[blob], rtol=1e-5, atol=1e-5 * np.abs(
            ref[blob]).max(), err_msg=blob)
    scale = model.get_layer("scale1_w")
    assert isinstance(scale, Caffe2Broadcast) and scale.mode == "mul"
    np.testing.assert_array_equal(np.asarray(scale.weight).reshape(-1), params["scale1_w"])
    assert model.get_layer("scale1_b").weight.trainable


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_spatial_bn_and_scale_train_with_fit_and_round_trip_keras(tmp_path):
    predict, params = nets.caffe_style()
    model = to_keras(predict, params, (3, 13, 13))
    trainable = {w.path for w in model.trainable_weights}
    assert {"scale1_w/weight", "scale1_b/weight", "bn1/gamma", "bn1/beta"} <= trainable
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 3, 13, 13)).astype(np.float32)
    labels = keras.utils.to_categorical(rng.integers(0, 5, 16), 5)
    before = {name: np.asarray(model.get_layer(name).weight).copy()
              for name in ("scale1_w", "scale1_b")}
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy")
    losses = model.fit(x, labels, epochs=8, batch_size=16, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    for name, value in before.items():
        assert not np.allclose(np.asarray(model.get_layer(name).weight), value), name
    path = tmp_path / "caffe_style.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(np.asarray(reloaded(x)), np.asarray(model(x)))
    assert isinstance(reloaded.get_layer("scale1_w"), Caffe2Broadcast)


def test_broadcast_between_two_data_tensors():
    rng = np.random.default_rng(2)
    x, s = rng.normal(size=(2, 4, 3, 5)).astype(np.float32), rng.normal(size=(2, 4)).astype(
        np.float32)
    net = NetDef(ops=[Operator("Mul", ("x", "s"), ("y",), {"broadcast": 1, "axis": 0}),
                      Operator("Add", ("y", "x"), ("z",))],
                 external_input=["x", "s"], external_output=["y", "z"])
    y, z = to_keras(net, {}, {"x": (4, 3, 5), "s": (4,)})([x, s])
    expected = x * s[:, :, None, None]
    np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(z), expected + x, rtol=1e-6, atol=1e-6)


def test_numpy_broadcast_of_a_parameter_and_its_layout():
    """Add without broadcast=1: numpy's rule (aligned from the right), here (C, 1, 1)."""
    rng = np.random.default_rng(3)
    x, bias = rng.normal(size=(2, 4, 3, 5)).astype(np.float32), rng.normal(size=(4, 1, 1))
    net = NetDef(ops=[Operator("Add", ("x", "bias"), ("y",))], external_output=["y"])
    model = to_keras(net, {"bias": bias.astype(np.float32)}, (4, 3, 5))
    np.testing.assert_allclose(np.asarray(model(x)), x + bias, rtol=1e-6, atol=1e-6)
    assert model.get_layer("bias").weight.shape == (1, 1, 4)  # channels last inside


@pytest.mark.parametrize("op, param, text", [
    (Operator("Mul", ("x", "s"), ("y",), {"broadcast": 1, "axis": 1}), (3,),
     r"parameter 's' of shape \(3,\) does not broadcast to 'x' of shape \('N', 4, 3, 5\)"),
    (Operator("Add", ("x", "s"), ("y",)), (2, 4, 1, 1), "spanning the batch axis"),
    (Operator("Add", ("x", "s"), ("y",), {"broadcast": 1, "axis": 7}), (4,),
     r"Argument `axis` must be an int in \[0, 3\] or -1 for Add's 4-D first input and "
     r"1-D second input \(broadcast=1\). Received: axis=7"),
])
def test_broadcasts_that_do_not_fit_are_refused_naming_the_op(op, param, text):
    net = NetDef(ops=[op], external_output=["y"])
    with pytest.raises(ValueError, match=rf"to_keras: op #0 {op.type} -> \['y'\]: .*{text}"):
        to_keras(net, {"s": np.ones(param, np.float32)}, (4, 3, 5))


# ---------------------------------------------------------------- FC axis_w


def test_fc_axis_w_weight_is_reshaped_once_and_trainable():
    predict, ref, params = _case("fc_axis_w3_weight_1x1xNxK")
    model = to_keras(predict, params, (8, 1, 1))
    dense = model.get_layer("Y")  # named after its output: the weight is not "<name>_w"
    assert isinstance(dense, keras.layers.Dense) and dense.kernel.trainable
    np.testing.assert_array_equal(np.asarray(dense.kernel), params["W"].reshape(6, 8).T)


# ---------------------------------------------------------------- one refusal names everything


def _refused_net():
    nchw = {"order": "NCHW"}
    return NetDef(ops=[
        Operator("Conv", ("data", "w", "b"), ("c",), {"kernel": 3, "legacy_pad": 3, **nchw}),
        Operator("MaxPool", ("c",), ("p",), {"kernel": 2, "stride": 2, "legacy_pad": 1,
                                             **nchw}),
        Operator("MaxPool", ("p",), ("p2",), {"kernel": 2, "stride": 2, "legacy_pad": 1,
                                              **nchw}),
        Operator("Conv", ("p2", "w2"), ("d",), {"kernel": 1, **nchw}, engine="DNNLOWP"),
        Operator("Add", ("d", "w2"), ("e",), {"broadcast": 2}),
        Operator("FC", ("e", "fcw", "b"), ("f",), {"axis_w": 4}),
        # detection ops with no Keras layer (the five of Detectron's nets convert)
        Operator("RoIPool", ("f", "d"), ("rois",)),
        Operator("RoIAlignRotated", ("d", "rois"), ("r",)),
        Operator("PSRoIPool", ("r",), ("boxes",)),
        Operator("HeatmapMaxKeypoint", ("boxes",), ("bt",)),
        Operator("If", ("bt",), ("i",)),
        Operator("Int8Conv", ("i",), ("q",)),
        Operator("Int8Conv", ("q",), ("q2",)),
        Operator("MaxPool", ("q2",), ("m",), {"kernel": 2, "order": "NHWC"}),
    ], external_output=["m"])


REFUSED = [
    "legacy_pad=3 (CAFFE_LEGACY_POOLING) on Conv; 0 are converted (op #0)",
    "legacy_pad=1 (VALID) on MaxPool; 0 and 3 are converted (ops #1, #2: 2 ops)",
    "engine 'DNNLOWP' on Conv (op #3)",
    "Add with broadcast=2 (0 and 1 are converted) (op #4)",
    "FC axis_w=4 (weight 'fcw' of shape (2, 3, 4, 5) takes an int in [-4, 4)) (op #5)",
    "RoIPool (op #6, a detection op)",
    "RoIAlignRotated (op #7, a detection op)",
    "PSRoIPool (op #8, a detection op)",
    "HeatmapMaxKeypoint (op #9, a detection op)",
    "If (op #10, control flow)",
    "Int8Conv (ops #11, #12: 2 ops, a quantized Int8 op)",
    "order NHWC in a net of NCHW ops (op #13)",
]


def test_one_refusal_lists_every_unsupported_op_and_feature_before_building():
    params = {"w": np.ones((4, 3, 3, 3), np.float32), "b": np.ones(4, np.float32),
              "w2": np.ones((4, 4, 1, 1), np.float32), "fcw": np.ones((2, 3, 4, 5), np.float32)}
    # (5, 9, 9) does not fit the first conv (3 channels): building would fail there first
    with pytest.raises(ValueError) as info:
        to_keras(_refused_net(), params, (5, 9, 9))
    message = str(info.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("to_keras: unsupported Caffe2 op(s) and op feature(s) in 14 of "
                              "the net's ops: ")
    assert "; ".join(REFUSED) in message
    assert "Supported op types: Add, AffineChannel, AliasWithName, AveragePool" in message


def test_inspect_prints_the_same_list(tmp_path, capsys):
    params = {"w": np.ones((4, 3, 3, 3), np.float32), "b": np.ones(4, np.float32),
              "w2": np.ones((4, 4, 1, 1), np.float32), "fcw": np.ones((2, 3, 4, 5), np.float32)}
    (tmp_path / "p.pb").write_bytes(_refused_net().to_bytes())
    (tmp_path / "i.pb").write_bytes(nets.given_tensor_init_net(params).to_bytes())
    assert main(["inspect", str(tmp_path / "p.pb"), "--init-net", str(tmp_path / "i.pb")]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("convertible: no (14 of 14 ops unsupported)")
    assert lines[start + 1:start + 1 + len(REFUSED)] == [f"  unsupported: {r}" for r in REFUSED]


def test_inspect_says_convertible_yes(tmp_path, capsys):
    predict, params = nets.caffe_style()
    (tmp_path / "p.pb").write_bytes(predict.to_bytes())
    (tmp_path / "i.pb").write_bytes(nets.given_tensor_init_net(params).to_bytes())
    assert main(["inspect", str(tmp_path / "p.pb"), "--init-net", str(tmp_path / "i.pb")]) == 0
    assert "convertible: yes\n" in capsys.readouterr().out


# ---------------------------------------------------------------- --check: parameters vs data


@pytest.mark.parametrize("name", ["add_broadcast_axis1", "mul_broadcast_axis1_2d",
                                  "fc_axis_w3_weight_1x1xNxK"])
def test_convert_check_without_input_shape_knows_parameters_from_data(name, tmp_path, capsys):
    predict, ref, params = _case(name)
    (tmp_path / "init.pb").write_bytes(nets.given_tensor_init_net(params).to_bytes())
    forward = tmp_path / "forward.npz"  # only what Caffe2 was fed and wrote: no param/ keys
    np.savez(forward, **{k: ref[k] for k in ref.files if not k.startswith("param/")})
    out = tmp_path / "m.keras"
    assert main(["convert", str(tmp_path / "init.pb"), str(predict), str(out),
                 "--check", str(forward)]) == 0
    text = capsys.readouterr().out
    assert "all 1 blobs match Caffe2" in text and out.exists()
    report = check_forward(predict, params, forward)
    assert report.ok and report.blobs[0].max_rel <= 1e-6


def test_sum_with_a_parameter_is_refused_naming_the_op():
    """Caffe2's Sum takes equal shapes, batch axis included: a parameter ``[1, C, H, W]``
    fits a batch of 1 only (Caffe2 refuses the net at batch 2), so no Keras model (any
    batch) computes it; the refusal names the op and the blob."""
    rng = np.random.default_rng(4)
    p = rng.normal(size=(1, 3, 4, 5)).astype(np.float32)
    net = NetDef(ops=[Operator("Relu", ("x",), ("r",)), Operator("Sum", ("x", "r", "p"), ("y",))],
                 external_output=["y"])
    with pytest.raises(ValueError, match=r"op #1 Sum -> \['y'\]: unsupported Sum of init-net "
                                         r"blob\(s\) \['p'\]"):
        to_keras(net, {"p": p}, (3, 4, 5))


def test_scale_layer_in_an_nhwc_net():
    """NHWC: the channel axis is 3, so Caffe's Scale is Mul/Add with axis=3."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 5, 4, 3)).astype(np.float32)  # N, H, W, C
    s, t = rng.normal(size=3).astype(np.float32), rng.normal(size=3).astype(np.float32)
    net = NetDef(ops=[
        Operator("MaxPool", ("x",), ("p",), {"kernel": 2, "stride": 2, "legacy_pad": 3,
                                             "order": "NHWC"}),
        Operator("Mul", ("p", "s"), ("y",), {"broadcast": 1, "axis": 3}),
        Operator("Add", ("y", "t"), ("y",), {"broadcast": 1, "axis": 3}),
    ], external_output=["y"])
    model = to_keras(net, {"s": s, "t": t}, (5, 4, 3))
    pooled = nets.ceil_pool(x.transpose(0, 3, 1, 2), (2, 2), (2, 2), (0, 0))
    expected = pooled.transpose(0, 2, 3, 1) * s + t  # 5x4 -> 3x2 (ceil)
    assert model.output_shape == (None, 3, 2, 3)
    np.testing.assert_allclose(np.asarray(model(x)), expected, rtol=1e-6, atol=1e-6)
    assert model.get_layer("s").weight.shape == (1, 1, 3)


def test_a_ceil_mode_window_wholly_outside_the_input_is_refused():
    """With no pad and a stride larger than the kernel, the ceil rule can start a window
    past the input (9 cells, k2 s3: windows at 0, 3, 6, 9): refused, not computed."""
    net = NetDef(ops=[Operator("MaxPool", ("x",), ("y",), {"kernel": 2, "stride": 3,
                                                           "legacy_pad": 3})],
                 external_output=["y"])
    with pytest.raises(ValueError, match=r"op #0 MaxPool -> \['y'\]: unsupported legacy_pad=3 "
                                         r"with a last window outside the input \(size 9"):
        to_keras(net, {}, (1, 9, 9))


def test_inspect_without_the_init_net_checks_what_needs_no_parameters(tmp_path, capsys):
    net = NetDef(ops=[Operator("MaxPool", ("x",), ("y",), {"kernel": 2, "legacy_pad": 2})],
                 external_output=["y"])
    (tmp_path / "p.pb").write_bytes(net.to_bytes())
    assert main(["inspect", str(tmp_path / "p.pb")]) == 0
    out = capsys.readouterr().out
    assert ("convertible: no (1 of 1 ops unsupported)\n  unsupported: legacy_pad=2 (SAME) on "
            "MaxPool; 0 and 3 are converted (op #0)\n") in out
    (tmp_path / "q.pb").write_bytes(NetDef(ops=[Operator("Relu", ("x",), ("y",))]).to_bytes())
    assert main(["inspect", str(tmp_path / "q.pb")]) == 0
    assert ("convertible: yes (without --init-net, parameters are not checked)"
            in capsys.readouterr().out)


def test_convert_check_on_a_caffe_style_net_blob_by_blob(tmp_path, capsys):
    predict, params = nets.caffe_style()
    x = np.random.default_rng(6).normal(size=(2, 3, 13, 13)).astype(np.float32)
    blobs = nets.caffe_style_forward(x, params)
    forward = tmp_path / "forward.npz"
    np.savez(forward, **{"input/data": x}, **{f"blob/{k}": v for k, v in blobs.items()})
    (tmp_path / "init.pb").write_bytes(nets.given_tensor_init_net(params).to_bytes())
    (tmp_path / "predict.pb").write_bytes(predict.to_bytes())
    out = tmp_path / "caffe_style.keras"
    assert main(["convert", str(tmp_path / "init.pb"), str(tmp_path / "predict.pb"), str(out),
                 "--check", str(forward)]) == 0
    text = capsys.readouterr().out
    assert f"all {len(blobs)} blobs match Caffe2" in text
    assert "Caffe2Broadcast" in text and "Caffe2Pooling2D" in text  # import tfinit.caffe2
    np.testing.assert_allclose(np.asarray(keras.saving.load_model(out)(x)), blobs["prob"],
                               rtol=1e-5, atol=1e-6)
