"""tfinit.sources: where ExternalInitializer finds values (mapping, npz, checkpoint, init_net)."""


import numpy as np
import pytest

from tfinit import sources

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it


# ---------------------------------------------------------------- mapping


def test_mapping_source_returns_the_stored_array_without_copying():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    src = sources.open_source({"w": w, "b": [1.0, 2.0]})
    assert isinstance(src, sources.MappingSource)
    assert src.names() == ["b", "w"]
    assert src.get("w") is w
    np.testing.assert_array_equal(src.get("b"), [1.0, 2.0])
    assert "w" in src and "nope" not in src


def test_missing_name_names_parameter_source_and_some_present_names():
    src = sources.MappingSource({f"fc{i}_w": np.zeros(1) for i in range(9)})
    with pytest.raises(KeyError) as err:
        src.get("fc1_b")
    msg = str(err.value)
    assert "'fc1_b'" in msg and "a mapping of 9 arrays" in msg
    assert "'fc1_w'" in msg  # the close match is listed first
    assert "and 4 more" in msg  # five shown, the rest counted


def test_missing_name_in_empty_source():
    with pytest.raises(KeyError, match="holds nothing"):
        sources.MappingSource({}).get("w")


def test_mapping_refuses_object_values_and_non_string_keys():
    src = sources.MappingSource({"w": np.array([object()], dtype=object)})
    with pytest.raises(TypeError, match="'w'.*object"):
        src.get("w")
    with pytest.raises(TypeError, match="strings.*1"):
        sources.MappingSource({1: np.zeros(1)})
    with pytest.raises(TypeError, match="Argument `name` must be a string. Received: name=3"):
        src.get(3)


# ---------------------------------------------------------------- npz


def test_npz_source_reads_names_and_exact_values(tmp_path):
    path = tmp_path / "params.npz"
    w = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.savez(path, fc_w=w, fc_b=np.arange(4, dtype=np.int64))
    src = sources.open_source(str(path))
    assert isinstance(src, sources.NpzSource)
    assert src.names() == ["fc_b", "fc_w"]
    got = src.get("fc_w")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, w)
    assert src.get("fc_b").dtype == np.int64
    with pytest.raises(KeyError, match="'fc_x'.*params.npz.*'fc_b'"):
        src.get("fc_x")


def test_npz_object_array_is_refused_without_unpickling(tmp_path):
    path = tmp_path / "pickled.npz"
    np.savez(path, ok=np.zeros(2), bad=np.array([{"evil": 1}], dtype=object))
    src = sources.open_source(path)  # os.PathLike works too
    np.testing.assert_array_equal(src.get("ok"), np.zeros(2))
    with pytest.raises(ValueError, match="'bad'.*object array.*never unpickles"):
        src.get("bad")


def test_npz_bfloat16_saved_as_raw_bytes_is_refused(tmp_path):
    import ml_dtypes

    path = tmp_path / "bf16.npz"
    np.savez(path, w=np.array([1.5], ml_dtypes.bfloat16))  # numpy records it as |V2
    with pytest.raises(TypeError, match="'w'.*raw \\|V2 records.*float32"):
        sources.open_source(path).get("w")
    # In memory, bfloat16 arrays are numbers and pass.
    assert sources.MappingSource({"w": np.ones(1, ml_dtypes.bfloat16)}).get("w").dtype.kind == "V"


def test_npz_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        sources.open_source(str(tmp_path / "missing.npz"))
    single = tmp_path / "single.npz"
    with open(single, "wb") as f:
        np.save(f, np.zeros(2))
    with pytest.raises(ValueError, match="single .npy array"):
        sources.NpzSource(single)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="not a readable .npz"):
        sources.NpzSource(garbage)


# ---------------------------------------------------------------- TF checkpoints


@pytest.fixture(scope="module")
def checkpoint(tf, tmp_path_factory):
    """A tf.train.Checkpoint with two modules, both holding a variable named "kernel"."""
    folder = tmp_path_factory.mktemp("ckpt")
    a, b = tf.Module(), tf.Module()
    a.w = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="kernel")
    a.h = tf.Variable(np.array([1, 2], np.float16), name="half")
    b.w = tf.Variable(np.ones((2,), np.float32), name="kernel")
    b.steps = tf.Variable(np.int64(7), name="gpu_0/steps")
    prefix = tf.train.Checkpoint(a=a, b=b).save(str(folder / "ck"))
    return folder, prefix


@pytest.mark.tensorflow_only  # TensorFlow checkpoints
def test_checkpoint_full_keys_and_key_without_suffix(checkpoint):
    folder, prefix = checkpoint
    src = sources.open_source(prefix)
    assert isinstance(src, sources.CheckpointSource)
    key = "a/w/.ATTRIBUTES/VARIABLE_VALUE"
    assert key in src.names() and "_CHECKPOINTABLE_OBJECT_GRAPH" not in src.names()
    np.testing.assert_array_equal(src.get(key), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(src.get("a/w"), np.arange(6).reshape(2, 3))
    assert src.get("a/h").dtype == np.float16


@pytest.mark.tensorflow_only  # TensorFlow checkpoints
def test_checkpoint_short_variable_names(checkpoint):
    _, prefix = checkpoint
    src = sources.CheckpointSource(prefix)
    np.testing.assert_array_equal(src.get("half"), np.array([1, 2], np.float16))
    assert src.get("gpu_0/steps") == 7 and src.get("gpu_0/steps").dtype == np.int64
    with pytest.raises(ValueError, match="'kernel' is ambiguous.*'a/w/.*'b/w/.*full key"):
        src.get("kernel")
    with pytest.raises(KeyError, match="'kernal'.*TensorFlow checkpoint.*'kernel'"):
        src.get("kernal")


@pytest.mark.tensorflow_only  # TensorFlow checkpoints
def test_checkpoint_opened_from_directory_index_file_and_reader(tf, checkpoint):
    folder, prefix = checkpoint
    for handle in (str(folder), prefix + ".index", tf.train.load_checkpoint(prefix)):
        src = sources.open_source(handle)
        assert isinstance(src, sources.CheckpointSource)
        np.testing.assert_array_equal(src.get("half"), np.array([1, 2], np.float16))


@pytest.mark.tensorflow_only  # TensorFlow checkpoints
def test_checkpoint_values_are_tensors_from_path_and_arrays_from_reader(tf, checkpoint):
    _, prefix = checkpoint
    value = sources.open_source(prefix).get("half")
    assert isinstance(value, tf.Tensor) and value.dtype == tf.float16 and value.shape == (2,)
    value = sources.open_source(tf.train.load_checkpoint(prefix)).get("half")
    assert isinstance(value, np.ndarray) and value.dtype == np.float16


@pytest.mark.tensorflow_only  # TensorFlow checkpoints
def test_checkpoint_string_values_are_refused(tf, tmp_path):
    m = tf.Module()
    m.s = tf.Variable(["a", "b"], name="words")
    prefix = tf.train.Checkpoint(m=m).save(str(tmp_path / "ck"))
    with pytest.raises(TypeError, match="'words'.*holds string values"):
        sources.open_source(prefix).get("words")


@pytest.mark.tensorflow_only  # TensorFlow checkpoints
def test_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="No TensorFlow checkpoint"):
        sources.CheckpointSource(str(tmp_path))
    (tmp_path / "bad.index").write_bytes(b"junk")
    with pytest.raises(ValueError, match="Cannot read TensorFlow checkpoint"):
        sources.CheckpointSource(str(tmp_path / "bad"))


@pytest.mark.tensorflow_only  # TensorFlow checkpoints
def test_tf1_name_based_checkpoint_keys(tf, tmp_path):
    # TF1 Saver checkpoints have no object graph: keys are the variable names.
    with tf.Graph().as_default():
        tf.compat.v1.get_variable("layer/w", initializer=np.full((2,), 3.0, np.float32))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(sess, str(tmp_path / "v1"))
    src = sources.open_source(prefix)
    np.testing.assert_array_equal(src.get("layer/w"), [3.0, 3.0])


# ---------------------------------------------------------------- dispatch


def test_open_source_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no source at"):
        sources.open_source(str(tmp_path / "nothing"))
    other = tmp_path / "weights.txt"
    other.write_text("1 2 3")
    with pytest.raises(ValueError, match="cannot tell what kind"):
        sources.open_source(str(other))
    with pytest.raises(TypeError, match="Received: source of type int"):
        sources.open_source(42)


def test_caffe2_init_net_dispatch_calls_load_init_net(tmp_path, monkeypatch):
    # Only the dispatch is tested here: tfinit.caffe2 is another module's job, so a
    # stand-in records what it receives. The real init_net round trip is tested there.
    calls = []

    def load_init_net(init_net):
        calls.append(init_net)
        return {"fc_w": np.ones((2, 2), np.float32)}

    monkeypatch.setattr(sources, "_init_net_reader", None)
    assert sources.register_init_net_reader(load_init_net) is None
    pb = tmp_path / "init_net.pb"
    pb.write_bytes(b"\x0a\x00")
    src = sources.open_source(str(pb))
    assert isinstance(src, sources.Caffe2InitNetSource) and calls == [str(pb)]
    np.testing.assert_array_equal(src.get("fc_w"), np.ones((2, 2)))
    with pytest.raises(KeyError, match="Caffe2 init_net .*init_net.pb"):
        src.get("fc_b")
    src = sources.open_source(b"\x0a\x00")
    assert calls[-1] == b"\x0a\x00" and "2 bytes" in str(src)
    with pytest.raises(FileNotFoundError, match="Caffe2 init_net"):
        sources.Caffe2InitNetSource(str(tmp_path / "absent.pb"))


def test_tfinit_caffe2_registers_its_init_net_reader():
    import tfinit.caffe2

    assert sources._init_net_reader is tfinit.caffe2.load_init_net
    with pytest.raises(TypeError, match="Argument `reader` must be callable"):
        sources.register_init_net_reader("load_init_net")


def test_without_a_reader_init_nets_are_refused_clearly(monkeypatch):
    monkeypatch.setattr(sources, "_init_net_reader", None)
    with pytest.raises(ImportError, match="import tfinit.caffe2"):
        sources.open_source(b"\x0a\x00")
