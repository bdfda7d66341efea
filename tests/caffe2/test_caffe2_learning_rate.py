"""tfinit.caffe2.learning_rate against Caffe2's LearningRate op, run for real
(tests/data/caffe2_learning_rate.json: PyTorch 1.8.1's Caffe2, iterations 0..60)."""

import json

import keras
import numpy as np
import pytest
from conftest import REPO

import tfinit.caffe2
from tfinit.caffe2 import NetDef, Operator, learning_rate, read_netdef

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it
DATA = json.loads((REPO / "tests" / "data" / "caffe2_learning_rate.json").read_text())
CASES = [c for c in DATA["cases"] if not c["error"]]
N = 60


def _split(case):
    args = dict(case["args"])
    return args.pop("policy"), -args.pop("base_lr"), args


def _rates(schedule, steps=N):
    return np.array([float(schedule(k)) for k in range(steps)], np.float32)


def _caffe2(case):
    """The rate of Caffe2's updates 1..N (iteration blob 1..N), positive."""
    return -np.array(case["rates"][1:N + 1], np.float32)


def test_every_policy_of_caffe2_is_in_the_reference_data():
    tested = {_split(c)[0] for c in CASES}
    assert tested == set(tfinit.caffe2.learning_rate_policies())
    assert len(tested) == 18


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_rate_at_keras_step_k_is_caffe2s_at_iteration_k_plus_1(case):
    policy, base_lr, args = _split(case)
    got = _rates(learning_rate(policy, base_lr, **args))
    np.testing.assert_allclose(got, _caffe2(case), rtol=1e-6, atol=0)


def test_keras_step_is_one_behind_caffe2s_iteration():
    case = next(c for c in CASES if c["name"] == "exp")
    policy, base_lr, args = _split(case)
    got = _rates(learning_rate(policy, base_lr, **args))
    off_by_one = -np.array(case["rates"][:N], np.float32)
    assert not np.allclose(got, off_by_one, rtol=1e-6)


def test_poly_past_max_iter_is_nan_as_in_caffe2():
    case = next(c for c in CASES if c["name"] == "poly")
    policy, base_lr, args = _split(case)
    got = _rates(learning_rate(policy, base_lr, **args))
    assert np.isnan(got[55]) and np.isnan(_caffe2(case)[55])


@pytest.mark.parametrize("name", ["composite", "cosine_t_mult", "step_small_gamma"])
def test_builds_from_a_learning_rate_operator_read_from_a_net(name):
    case = next(c for c in CASES if c["name"] == name)
    op = Operator("LearningRate", ("iter",), ("lr",), dict(case["args"]))
    typed = read_netdef(NetDef(ops=[op]).to_bytes()).ops[0]
    np.testing.assert_allclose(_rates(learning_rate(typed)), _caffe2(case), rtol=1e-6)


@pytest.mark.parametrize("name", ["composite_scaled", "hill", "cyclical_decay"])
def test_serializes_and_round_trips_get_config(name):
    case = next(c for c in CASES if c["name"] == name)
    policy, base_lr, args = _split(case)
    schedule = learning_rate(policy, base_lr, **args)
    config = keras.optimizers.schedules.serialize(schedule)
    json.dumps(config)
    again = keras.optimizers.schedules.deserialize(config)
    assert type(again) is type(schedule) and again.get_config() == schedule.get_config()
    np.testing.assert_array_equal(_rates(again), _rates(schedule))


def test_an_optimizer_with_the_schedule_takes_caffe2s_rates():
    schedule = learning_rate("step", 1.0, stepsize=1, gamma=0.5)
    opt = keras.optimizers.SGD(learning_rate=schedule)
    w = keras.Variable(np.zeros([1], np.float32))
    seen = []
    for _ in range(3):
        before = float(np.asarray(w)[0])
        opt.apply_gradients([(np.ones([1], np.float32), w)])
        seen.append(before - float(np.asarray(w)[0]))
    assert seen == [0.5, 0.25, 0.125]  # Caffe2's iterations 1, 2, 3


def test_unknown_policy_lists_the_known_ones():
    with pytest.raises(ValueError, match="multistep") as err:
        learning_rate("multistep", 0.1, stepsize=[5], gamma=0.5)
    assert "'compositeCosine'" in str(err.value) and "'step'" in str(err.value)


@pytest.mark.parametrize("base_lr", [0.0, -0.1, float("nan"), "0.1", True])
def test_base_lr_must_be_positive(base_lr):
    with pytest.raises(ValueError, match="`base_lr` must be a positive number"):
        learning_rate("fixed", base_lr)


@pytest.mark.parametrize("args, error, match", [
    ({"stepsize": 0, "gamma": 0.5}, ValueError, "`stepsize` must be > 0"),
    ({"stepsize": 2, "gama": 0.5}, TypeError, "takes no argument gama"),
    ({"stepsize": 2.5, "gamma": 0.5}, TypeError, "`stepsize` must be an integer"),
])
def test_bad_arguments_name_the_argument(args, error, match):
    with pytest.raises(error, match=match):
        learning_rate("step", 0.1, **args)


def test_composite_checks_its_sub_policies():
    with pytest.raises(ValueError, match="sub_policy_num_iters"):
        learning_rate("composite", 0.1)
    with pytest.raises(ValueError, match="`sub_policy_0_policy`"):
        learning_rate("composite", 0.1, sub_policy_num_iters=[3], sub_policy_0_policy="nope")
    with pytest.raises(TypeError, match="sub_policy_1_gamma"):
        learning_rate("composite", 0.1, sub_policy_num_iters=[3],
                      sub_policy_0_policy="fixed", sub_policy_1_gamma=0.5)


def test_an_operator_of_another_type_is_refused():
    with pytest.raises(ValueError, match="a FC operator"):
        learning_rate(Operator("FC", ("x", "w", "b"), ("y",)))
