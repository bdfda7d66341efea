"""Contract tests: one per private Keras/TensorFlow touchpoint in tfinit/_keras_internals.py.

Each failure names the installed Keras and TensorFlow versions: it means that a release
moved an internal tfinit relies on, and tfinit must follow before that version is claimed.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfinit import _keras_internals as internals

MOVED = f"a Keras/TensorFlow internal moved ({internals.versions()})"


def test_backend_variable_is_the_tf_variable_behind_a_keras_variable():
    v = keras.Variable(np.ones(2, "f4"))
    assert isinstance(internals.backend_variable(v), tf.Variable), MOVED
    assert internals.backend_variable(v) is v.value, MOVED


def test_keras_variable_in_creation_is_found_from_the_creator():
    seen = []

    def creator(next_creator, **kwargs):
        seen.append(internals.keras_variable_in_creation(kwargs["initial_value"]))
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        from_initializer = keras.Variable(keras.initializers.Ones(), shape=(2,))
        from_value = keras.Variable(np.zeros(3, "f4"))
    (owner, initializer), (value_owner, none) = seen
    assert owner is from_initializer and isinstance(initializer, keras.initializers.Ones), MOVED
    assert value_owner is from_value and none is None, MOVED


def test_make_instance_of_changes_one_object_only():
    class Sub(keras.Variable):
        pass

    a, b = keras.Variable(1.0), keras.Variable(2.0)
    internals.make_instance_of(a, Sub)
    assert type(a) is Sub and type(b) is not Sub, MOVED
    assert float(a.numpy()) == 1.0, MOVED


def test_hooked_variable_serves_the_reads_of_layer_calls_only():
    seen = []

    class Cached(internals.HookedKerasVariable):
        def layer_read(self, tf_var, autocast_dtype):
            seen.append(autocast_dtype)
            return tf.fill(self.shape, tf.constant(7.0, autocast_dtype or "float32"))

    v = keras.Variable(np.ones(2, "f4"))
    internals.make_instance_of(v, Cached)

    class Reader(keras.layers.Layer):
        def call(self, x):
            assert internals.in_layer_call(), MOVED
            return x + v.value

    out = Reader(dtype="mixed_float16")(np.zeros(2, "f4"))
    assert out.dtype == "float16" and np.all(np.asarray(out) == 7.0), MOVED
    assert seen == ["float16"], MOVED
    assert not internals.in_layer_call(), MOVED
    assert np.asarray(v.value).tolist() == [1.0, 1.0], MOVED  # outside a call: Keras's read


def test_layer_being_built_is_the_caller_of_the_innermost_name_scope():
    seen = []

    class Probe(keras.layers.Layer):
        def build(self, input_shape):
            seen.append(internals.layer_being_built())
            self.w = self.add_weight(shape=(1,))

    probe = Probe()
    probe.build((None, 1))
    assert seen == [probe], MOVED
    assert internals.layer_being_built() is None, MOVED


def test_all_layers_lists_nested_layers():
    inner = keras.layers.Dense(1)
    model = keras.Sequential([keras.Input((2,)), inner])
    assert model in internals.all_layers(model) and inner in internals.all_layers(model), MOVED


def test_layers_holding_finds_exactly_the_layers_constructed_under_a_policy():
    policy = keras.dtype_policies.DTypePolicy("float32")
    mine, other = keras.layers.Dense(1, dtype=policy), keras.layers.Dense(1)
    found = internals.layers_holding(policy)
    assert mine in found and other not in found, MOVED


def test_models_compiled_with_finds_exactly_the_models_holding_the_optimizer():
    optimizer = keras.optimizers.SGD()
    mine = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    other = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    assert internals.models_compiled_with(optimizer) == [], MOVED
    mine.compile(optimizer=optimizer, loss="mse")
    other.compile(optimizer=keras.optimizers.SGD(), loss="mse")
    assert internals.models_compiled_with(optimizer) == [mine], MOVED


def test_written_elsewhere_variables_write_nothing_and_are_expected_nowhere(tmp_path):
    class Elsewhere(internals.WrittenElsewhere, keras.Variable):
        pass

    module = tf.Module()
    module.kept, module.skipped = keras.Variable(1.0), Elsewhere(2.0)
    path = tf.train.Checkpoint(module=module).save(str(tmp_path / "ck"))
    keys = [key for key, _ in tf.train.list_variables(path)]
    assert any("kept" in key for key in keys), MOVED
    assert not any("skipped" in key for key in keys), MOVED
    other = tf.Module()
    other.kept, other.skipped = keras.Variable(0.0), Elsewhere(0.0)
    status = tf.train.Checkpoint(module=other).restore(path)
    status.assert_existing_objects_matched().assert_consumed()
    assert float(other.kept.numpy()) == 1.0 and float(other.skipped.numpy()) == 0.0, MOVED


def test_optimizer_variable_index_is_the_position_it_was_built_for():
    a, b = keras.Variable(np.ones(2, "f4")), keras.Variable(np.ones(3, "f4"))
    optimizer = keras.optimizers.SGD()
    optimizer.build([a, b])
    assert internals.optimizer_variable_index(optimizer, b) == 1, MOVED
    assert internals.optimizer_variable_index(optimizer, a) == 0, MOVED


def test_object_methods_set_and_unset_on_one_object():
    a, b = keras.layers.Dense(1), keras.layers.Dense(1)
    internals.set_object_method(a, "get_config", lambda: {"mine": True})
    assert internals.has_object_method(a, "get_config") and a.get_config() == {"mine": True}
    assert "mine" not in b.get_config(), MOVED
    internals.unset_object_method(a, "get_config")
    assert "mine" not in a.get_config(), MOVED


def test_uninitialized_variables_and_their_deferred_initializer():
    layer = keras.layers.Dense(2)
    with keras.StatelessScope():
        layer.build((None, 3))
        pending = internals.uninitialized_variables(layer)
        assert {v.name for v in pending} == {"kernel", "bias"}, MOVED
        assert all(callable(internals.deferred_initializer(v)) for v in pending), MOVED
    assert internals.uninitialized_variables(layer) == [], MOVED


def test_distributed_container_of_a_replica_component():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        v = tf.Variable(1.0)
    assert internals.distributed_container(tf.Variable(1.0)) is None, MOVED
    component = getattr(v, "_values", [v])[0]
    container = internals.distributed_container(component)
    assert container is None or container is v, MOVED


def test_in_saved_model_save_tells_saved_model_from_checkpoint(tmp_path):
    seen = {}

    class Probe(tf.Module):
        def __init__(self):
            self.v = tf.Variable(1.0)
            original = self.v._serialize_to_tensors

            def serialize():
                seen.setdefault(where[0], internals.in_saved_model_save())
                return original()

            internals.set_object_method(self.v, "_serialize_to_tensors", serialize)

    where = ["checkpoint"]
    probe = Probe()
    tf.train.Checkpoint(p=probe).write(str(tmp_path / "ckpt"))
    where[0] = "saved_model"
    tf.saved_model.save(probe, str(tmp_path / "sm"))
    assert seen == {"checkpoint": False, "saved_model": True}, MOVED


def test_variable_checkpoint_protocol():
    v = tf.Variable([1.0, 2.0])
    tensors = internals.serialize_variable(v)
    assert set(tensors) == {"VARIABLE_VALUE"}, MOVED
    internals.restore_variable(v, {"VARIABLE_VALUE": tf.constant([3.0, 4.0])})
    assert v.numpy().tolist() == [3.0, 4.0], MOVED


def test_distribution_merge_helpers():
    assert isinstance(internals.strategy_supports_no_merge_call(), bool), MOVED
    strategy = tf.distribute.get_strategy()
    got = internals.maybe_merge_call(lambda s, x: x + 1, strategy, 1)
    assert got == 2, MOVED


def test_trackable_checks():
    assert internals.is_trackable(tf.Module()) and not internals.is_trackable(object()), MOVED
    module = tf.Module()
    module.d = {}
    assert internals.is_tracked_container(module.d), MOVED


def test_version_check_refuses_older_and_warns_on_newer_releases():
    import pytest

    from tfinit import _versions

    with pytest.raises(ImportError, match=r"tfinit needs keras >= 3.10.0 .* keras 3.9.2 is"):
        _versions.check("keras", "3.9.2")
    with pytest.warns(UserWarning, match=r"tested with tensorflow >= 2.16.2 and < 2.22"):
        _versions.check("tensorflow", "2.22.0")
    _versions.check("keras", keras.__version__)  # the installed pair is in range
    _versions.check("tensorflow", tf.__version__)


def test_variable_checkpoint_protocol_for_distributed_variables():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        v = tf.Variable([1.0, 2.0])
    assert internals.serialize_variable(v)["VARIABLE_VALUE"].numpy().tolist() == [1.0, 2.0]
    internals.restore_variable(v, {"VARIABLE_VALUE": tf.constant([5.0, 6.0])})
    assert v.numpy().tolist() == [5.0, 6.0], MOVED


def test_control_flow_outer_graph_is_the_graph_enclosing_loop_and_cond_bodies():
    seen = {}

    @tf.function
    def traced(x):
        seen["function"] = internals.control_flow_outer_graph()
        function_graph = tf.compat.v1.get_default_graph()

        def body(i, total):
            seen["loop"] = internals.control_flow_outer_graph()

            def inner(j, t):
                seen["nested"] = internals.control_flow_outer_graph()
                return j + 1, t + x

            _, total = tf.while_loop(lambda j, t: j < 2, inner, (0, total))
            return i + 1, total

        tf.cond(x > 0, lambda: _record_cond(seen) + x, lambda: x)
        seen["expected"] = function_graph
        return tf.while_loop(lambda i, t: i < 3, body, (0, x))[1]

    assert float(traced(tf.constant(1.0))) == 7.0
    assert internals.control_flow_outer_graph() is None, MOVED  # eager
    assert seen["function"] is None, MOVED  # a tf.function's own graph is no loop body
    for where in ("loop", "nested", "cond"):
        assert seen[where] is seen["expected"], (where, MOVED)


def _record_cond(seen):
    seen["cond"] = internals.control_flow_outer_graph()
    return tf.constant(0.0)


def test_carry_weight_decay_exclusions_adds_to_the_var_list_exclusions():
    old, new, other = (keras.Variable(np.ones(2, "f4")) for _ in range(3))
    optimizer = keras.optimizers.AdamW(weight_decay=0.5)
    optimizer.exclude_from_weight_decay(var_list=[old])
    internals.carry_weight_decay_exclusions(optimizer, [(old, new), (other, other)])
    optimizer.build([new, other])
    assert not optimizer._use_weight_decay(new), MOVED
    assert optimizer._use_weight_decay(other), MOVED
    # Applied: the excluded variable keeps its value under a zero gradient.
    optimizer.apply([np.zeros(2, "f4"), np.zeros(2, "f4")], [new, other])
    assert new.numpy().tolist() == [1.0, 1.0], MOVED
    assert other.numpy()[0] < 1.0, MOVED


def test_keras_tensor_origin_is_the_call_that_made_a_symbolic_tensor():
    inputs = keras.Input((4,))
    dense = keras.layers.Dense(3)
    first = dense(inputs)
    second = dense(keras.layers.Dense(4)(first))  # a second call of the same layer
    assert internals.keras_tensor_origin(first) == (dense, (inputs,)), MOVED
    layer, (made_by,) = internals.keras_tensor_origin(second)
    assert layer is dense and internals.keras_tensor_origin(made_by)[0] is not dense, MOVED
    assert internals.keras_tensor_origin(inputs)[1] == (), MOVED
    assert internals.keras_tensor_origin(np.ones(2)) == (None, ()), MOVED


def test_checkpoint_object_graph_maps_attribute_paths_to_keys(tmp_path):
    module = tf.Module()
    module.weights = tf.Variable([1.0, 2.0])
    path = tf.train.Checkpoint(model=module).write(str(tmp_path / "ckpt"))
    reader = tf.train.load_checkpoint(path)
    graph = internals.checkpoint_object_graph(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    keys = {full: key for full, key in graph}
    assert any(key.startswith("model/weights/") for key in keys.values()), (graph, MOVED)
    assert all(reader.has_tensor(key) for key in keys.values()), MOVED


def test_autocasts_reads_back_the_variable_flag():
    assert internals.autocasts(keras.Variable(np.ones(2, "f4"))) is True, MOVED
    assert internals.autocasts(keras.Variable(np.ones(2, "f4"), autocast=False)) is False, MOVED


def test_in_xla_compilation_is_true_only_while_tracing_for_xla():
    seen = {}

    def probe(key):
        def traced(x):
            seen[key] = internals.in_xla_compilation()
            return x + 1
        return traced

    tf.function(probe("jit"), jit_compile=True)(tf.ones(2))
    tf.function(probe("graph"))(tf.ones(2))
    jit_inner = tf.function(probe("nested"), jit_compile=True)
    tf.function(lambda x: jit_inner(x))(tf.ones(2))
    assert internals.in_xla_compilation() is False, MOVED  # eager
    assert seen == {"jit": True, "graph": False, "nested": True}, MOVED


def test_owning_strategy_and_num_workers():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        mirrored = tf.Variable(1.0)
    assert internals.owning_strategy(mirrored) is strategy, MOVED
    assert internals.owning_strategy(tf.Variable(1.0)) is None, MOVED
    assert internals.num_workers(strategy) == 1, MOVED
    assert internals.num_workers(tf.distribute.get_strategy()) == 1, MOVED


def test_checkpoint_through_writes_and_restores_what_it_is_given(tmp_path):
    shadow = tf.Variable([5.0, 6.0])
    module = tf.Module()
    module.v = tf.Variable([1.0, 2.0])
    restored = []

    def restore(tensors):
        restored.append(tensors["VARIABLE_VALUE"].numpy().tolist())
        return module.v.assign(tensors["VARIABLE_VALUE"])

    internals.checkpoint_through(module.v, lambda: {"VARIABLE_VALUE": shadow.read_value()},
                                 restore)
    path = tf.train.Checkpoint(m=module).write(str(tmp_path / "c"))
    assert tf.train.load_checkpoint(path).get_tensor(
        "m/v/.ATTRIBUTES/VARIABLE_VALUE").tolist() == [5.0, 6.0], MOVED
    tf.train.Checkpoint(m=module).read(path).assert_consumed()
    assert restored == [[5.0, 6.0]] and module.v.numpy().tolist() == [5.0, 6.0], MOVED


def test_set_deferred_initializer_runs_when_keras_creates_the_variable():
    calls = []
    layer = keras.layers.Dense(2, kernel_initializer="ones")
    with keras.StatelessScope():
        layer.build((None, 3))
        for variable in internals.uninitialized_variables(layer):
            original = internals.deferred_initializer(variable)

            def initialize(original=original):
                calls.append(1)
                original()

            internals.set_deferred_initializer(variable, initialize)
    # Leaving the stateless scope, Keras creates the deferred variables through them.
    assert calls == [1, 1], MOVED
    assert layer.kernel.numpy().tolist() == [[1.0, 1.0]] * 3, MOVED


def test_optimizer_base_state_and_build():
    inner = keras.optimizers.SGD(0.1)
    wrapper = keras.optimizers.LossScaleOptimizer(inner)
    variables = [keras.Variable(np.ones(2, "f4"))]
    internals.build_optimizer_base(wrapper, variables)
    assert internals.optimizer_built_variables(wrapper) == variables, MOVED
    assert internals.optimizer_strategy(inner) is tf.distribute.get_strategy(), MOVED


def test_own_trainable_variables_and_is_initialized():
    inner = keras.layers.Dense(2)
    outer = keras.Sequential([keras.Input((3,)), inner])
    assert internals.own_trainable_variables(inner) == [inner.kernel, inner.bias], MOVED
    assert internals.own_trainable_variables(outer) == [], MOVED
    assert internals.is_initialized(inner.kernel), MOVED


def test_track_optimizer_variable_makes_an_existing_variable_optimizer_state():
    opt = keras.optimizers.SGD()
    opt.build([keras.Variable(np.ones(2, "f4"))])
    extra = keras.Variable(np.zeros(3, "f4"), name="extra")
    internals.track_optimizer_variable(opt, extra)
    assert any(v is extra for v in opt.variables), MOVED


def test_keep_out_of_optimizer_variables_leaves_a_slot_out_of_the_variables_only():
    opt = keras.optimizers.SGD(momentum=0.9)
    made = opt.add_variable_from_reference
    kept_out = []

    def add_variable_from_reference(reference_variable, name=None, initializer="zeros"):
        slot = made(reference_variable, name=name, initializer=initializer)
        if not kept_out:  # a variable the optimizer did not list yet: a fresh one
            slot = keras.Variable(np.zeros(2, "f4"), name="view")
            internals.keep_out_of_optimizer_variables(opt, slot)
            kept_out.append(slot)
        return slot

    internals.set_object_method(opt, "add_variable_from_reference", add_variable_from_reference)
    opt.build([keras.Variable(np.ones(2, "f4")), keras.Variable(np.ones(3, "f4"))])
    assert opt.momentums[0] is kept_out[0], MOVED
    assert not any(v is kept_out[0] for v in opt.variables), MOVED
    assert any(v is opt.momentums[1] for v in opt.variables), MOVED  # the others listed


def test_layers_with_policy_named_finds_layers_rebuilt_with_a_name_object():
    class Name(str):
        pass

    name = Name("mixed_float16")
    layer = keras.layers.Dense(2, dtype=name)  # as Operation.from_config passes policy.name
    plain = keras.layers.Dense(2, dtype="mixed_float16")
    found = internals.layers_with_policy_named(name)
    assert any(x is layer for x in found) and not any(x is plain for x in found), MOVED


@pytest.mark.slow
def test_set_variable_dtype_on_jax():
    """Off TensorFlow only (a tf.Variable's dtype is fixed): run on JAX in a subprocess."""
    import os
    import subprocess
    import sys

    script = ("import keras, numpy as np\n"
              "from tfinit import _keras_internals as internals\n"
              "v = keras.Variable(np.array([1.0, 2.5], 'f4'))\n"
              "internals.set_variable_dtype(v, 'float16', np.array([1.0, 2.5], 'f2'))\n"
              "assert v.dtype == 'float16' and np.asarray(v.value).dtype == np.float16\n"
              "v.assign(np.array([3.0, 4.0], 'f4'))\n"
              "assert np.asarray(v.value).dtype == np.float16\n")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"{MOVED}: {proc.stderr[-2000:]}"


def test_in_stateless_scope():
    assert not internals.in_stateless_scope(), MOVED
    with keras.StatelessScope():
        assert internals.in_stateless_scope(), MOVED


@pytest.mark.slow
def test_release_value_on_jax():
    """A split pair's scratch (JAX only): run on JAX in a subprocess."""
    import os
    import subprocess
    import sys

    script = ("import keras, numpy as np\n"
              "from tfinit import _keras_internals as internals\n"
              "v = keras.Variable(np.arange(3, dtype='f4'))\n"
              "internals.release_value(v)\n"
              "assert not internals.is_initialized(v)\n"
              "assert np.asarray(v.value).tolist() == [0.0, 0.0, 0.0]\n"
              "with keras.StatelessScope() as scope:\n"
              "    v.assign(np.ones(3, 'f4'))\n"
              "    assert np.asarray(v.value).tolist() == [1.0, 1.0, 1.0]\n"
              "assert not internals.is_initialized(v)\n"
              "v.assign(np.full(3, 2.0, 'f4'))\n"
              "assert np.asarray(v.value).tolist() == [2.0, 2.0, 2.0]\n")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"{MOVED}: {proc.stderr[-2000:]}"


def test_compiled_optimizer_is_the_object_compile_was_handed_and_is_reported():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    given = internals.compiled_optimizer(model)
    assert given is model.optimizer and isinstance(given, keras.optimizers.SGD), MOVED
    replacement = keras.optimizers.Adam(0.5)
    internals.set_compiled_optimizer(model, replacement)
    config = model.get_compile_config()["optimizer"]
    assert config["class_name"] == "Adam" and config["config"]["learning_rate"] == 0.5, MOVED
    assert internals.compiled_optimizer(keras.Sequential()) is None, MOVED


def test_called_inside_another_layer_tells_a_nested_call_from_the_entry():
    seen = []

    class Probe(keras.layers.Layer):
        def call(self, x):
            seen.append(internals.called_inside_another_layer(self))
            return x

    probe = Probe()
    outer = keras.Sequential([keras.Input((2,)), probe])
    probe(np.ones((1, 2), "f4"))
    outer(np.ones((1, 2), "f4"))
    assert seen[0] is False and seen[-1] is True, (seen, MOVED)


def test_widening_variable_reads_float32_inside_a_layer_call_only():
    class Wide(internals.WideningKerasVariable):
        def wide_layer_read(self, value):
            return keras.ops.cast(value, "float32")

    class Reader(keras.layers.Layer):
        def call(self, x):
            return self.v.value  # Keras's read (JAX and torch read every variable this way)

    reader = Reader(dtype="bfloat16")
    reader.v = reader.add_weight(shape=(2,), initializer="ones")
    internals.make_instance_of(reader.v, Wide)
    assert reader.v.dtype == "bfloat16"
    assert keras.backend.standardize_dtype(
        reader(np.ones((2,), "f4")).dtype) == "float32", MOVED
    assert keras.backend.standardize_dtype(reader.v.value.dtype) == "bfloat16", MOVED


@pytest.mark.slow
def test_variable_layout_on_jax():
    """A pair's other variable takes its variable's layout; shard_over lays a master out again
    (JAX only, four host devices): run on JAX in a subprocess."""
    import os
    import subprocess
    import sys

    script = (
        "import jax, keras, numpy as np\n"
        "from tfinit import _keras_internals as internals\n"
        "from keras.distribution import DeviceMesh, TensorLayout\n"
        "mesh = DeviceMesh((2, 2), ['batch', 'model'], jax.devices())\n"
        "layout = TensorLayout([None, 'model'], mesh)\n"
        "v = keras.Variable(np.arange(8, dtype='f4').reshape(2, 4), layout=layout)\n"
        "assert internals.variable_layout(v) is layout\n"
        "assert internals.variable_layout(keras.Variable(np.ones(2, 'f4'))) is None\n"
        "both = TensorLayout(['batch', 'model'], mesh)\n"
        "internals.set_variable_layout(v, both)\n"
        "assert internals.variable_layout(v) is both\n"
        "assert v.value.sharding.spec == jax.sharding.PartitionSpec('batch', 'model')\n"
        "assert np.asarray(v.value).ravel().tolist() == list(range(8))\n"
        "v.assign(np.zeros((2, 4), 'f4'))\n"
        "assert v.value.sharding.spec == jax.sharding.PartitionSpec('batch', 'model')\n")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"{MOVED}: {proc.stderr[-2000:]}"


def test_register_initializer_name_makes_a_bare_name_a_keras_identifier(tmp_path):
    """On every Keras CI runs (3.10 to the 3.16 nightly): Keras's own table of initializer
    names takes tfinit's, ``get`` and a layer resolve the bare name, and a ``.keras`` file of
    a model built with it loads with the same initializer and weights."""
    import tfinit
    from keras.src import initializers

    assert initializers.ALL_OBJECTS_DICT["XavierFill"] is tfinit.XavierFill, MOVED

    assert isinstance(keras.initializers.get("XavierFill"), tfinit.XavierFill), MOVED
    # Keras's own names are never shadowed
    assert not internals.register_initializer_name(type("Zeros", (tfinit.ConstantFill,), {}))
    assert type(keras.initializers.get("Zeros")) is keras.initializers.Zeros
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(
        4, kernel_initializer="XavierFill", bias_initializer="ConstantFill")])
    assert isinstance(model.layers[0].kernel_initializer, tfinit.XavierFill), MOVED
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(loaded.layers[0].kernel_initializer, tfinit.XavierFill), MOVED
    for a, b in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
