"""The command line's porting aids: inspect shows seeds and engines, convert --atol,
ops prints the nearest Keras initializer (the demo's progress: tests/cli/test_demo.py)."""

from tfinit import cli
from tfinit.caffe2 import NetDef, Operator
from tfinit.caffe2._netdef import DeviceOption


def test_inspect_shows_each_ops_random_seed_and_engine(tmp_path, capsys):
    net = NetDef(name="n", ops=[
        Operator("XavierFill", (), ("w",), {"shape": [2, 3]}, engine="CUDNN",
                 device_option=DeviceOption(random_seed=99)),
        Operator("GaussianFill", (), ("v",), {"shape": [2]}),
    ], device_option=DeviceOption(random_seed=7))
    path = tmp_path / "init_net.pb"
    path.write_bytes(net.to_bytes())
    assert cli.main(["inspect", str(path), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    op0 = next(line for line in lines if line.startswith("op #0"))
    op1 = next(line for line in lines if line.startswith("op #1"))
    assert op0.endswith("engine=CUDNN random_seed=99")
    assert op1.endswith("random_seed=7 (the net's)")


def test_ops_prints_the_nearest_keras_initializer(capsys):
    assert cli.main(["ops"]) == 0
    out = capsys.readouterr().out
    assert 'nearest Keras initializer: VarianceScaling(1.0, "fan_in", "uniform")' in out
    assert "nearest Keras initializer: RandomNormal" in out


def test_convert_takes_atol(capsys):
    args = cli.build_parser().parse_args(["convert", "i.pb", "p.pb", "o.keras", "--atol", "1e-3"])
    assert args.atol == 1e-3
    assert cli.main(["convert", "i.pb", "p.pb", "o.keras", "--atol", "0"]) == 2
    assert "Argument `--atol`" in capsys.readouterr().err

