"""The master invariant (``_invariant.py``) over drawn sequences of Keras calls.

A Hypothesis rule-based state machine builds a small model (Dense, Conv1D,
BatchNormalization, GRU or a tied ReversibleEmbedding) twice from the same fp32 weights: in
a tfinit scope (a drawn mode, compute dtype and master) and as its oracle (Keras
``mixed_<dtype>``; for ``master="split"`` the fp32-master scope). Each rule makes the same call
on both (fit with or without validation data and an EarlyStopping callback, evaluate,
predict, the per-batch calls, a direct call, freezing and unfreezing a layer, enable_lora,
compiling again, saving and loading ``.keras``, ``.weights.h5`` and a checkpoint, set_weights,
get/set_master_weights), and ``_invariant.check`` runs after every step. A failure shrinks to
a minimal sequence of calls.

CI runs ``EXAMPLES`` derandomized sequences per backend; ``TFINIT_INVARIANT_EXAMPLES=10000``
(docs/development.md) runs the long one.
"""

import collections
import os
import shutil
import tempfile

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

import _invariant as I
import _parity as P
from tfinit import mixed_precision as mp

pytestmark = pytest.mark.backend_neutral

BACKEND = keras.backend.backend()
L = keras.layers
#: sequences per backend (CI: about 2 minutes on 2 cores); the long run sets it to 10000
EXAMPLES = int(os.environ.get("TFINIT_INVARIANT_EXAMPLES", "25"))
SHRINK = os.environ.get("TFINIT_INVARIANT_SHRINK") != "0"
#: calls per sequence (at most)
STEPS = int(os.environ.get("TFINIT_INVARIANT_STEPS", "8"))

#: (mode, compute dtype, master): split and stochastic only with bfloat16 pseudo_fp16, on
#: TensorFlow and JAX; "split+int8": split masters, MasterWeightOptimizer(state_dtype="int8")
CONFIGS = [(mode, dtype, "fp32") for mode in P.MODES for dtype in P.DTYPES] + (
    [("pseudo_fp16", "bfloat16", "split"), ("pseudo_fp16", "bfloat16", "stochastic"),
     ("pseudo_fp16", "bfloat16", "split+int8")]
    if BACKEND in ("tensorflow", "jax") else [])
#: the oracle's master: split's is the fp32-master run, stochastic's and int8 state's a twin
#: (_invariant.py)
ORACLE_MASTER = {"split": "fp32", "stochastic": "stochastic", "split+int8": "split+int8"}


def scope_master(master):
    """The scope's ``master`` of a configuration's (``"split+int8"``: ``"split"``)."""
    return master.partition("+")[0]


def state_dtype(master):
    """The optimizer's ``state_dtype`` of a configuration's master (``"split+int8"``: int8)."""
    return master.partition("+")[2] or None


def _sequential(input_shape, layers):
    return lambda: keras.Sequential([keras.Input(input_shape), *layers(), L.Dense(2)])


def _tied():
    """A token embedding whose transpose is the output projection (a language model's head)."""
    inputs = keras.Input((5,), dtype="int32")
    embedding = L.ReversibleEmbedding(20, 4, tie_weights=True)
    h = L.Dense(4, activation="tanh")(embedding(inputs))
    return keras.Model(inputs, embedding(h, reverse=True))


#: name: (factory, x shape, y shape, integer inputs below)
MODELS = {
    "dense": (_sequential((6,), lambda: [L.Dense(8, activation="tanh")]), (6,), (2,), None),
    "conv": (_sequential((7, 3), lambda: [L.Conv1D(4, 3, activation="relu"), L.Flatten()]),
             (7, 3), (2,), None),
    "batch_norm": (_sequential((6,), lambda: [L.Dense(8), L.BatchNormalization()]),
                   (6,), (2,), None),
    "gru": (_sequential((4, 3), lambda: [L.GRU(3)]), (4, 3), (2,), None),
    "tied_embedding": (_tied, (5,), (5, 20), 20),
}


#: the models drawn (TFINIT_INVARIANT_MODELS=dense,gru: only those)
DRAWN_MODELS = sorted(os.environ.get("TFINIT_INVARIANT_MODELS", ",".join(MODELS)).split(","))
assert set(DRAWN_MODELS) <= set(MODELS), f"TFINIT_INVARIANT_MODELS: one of {sorted(MODELS)}"


class _Side:
    """One of the two models: how it is built, compiled, loaded and its masters read/set."""

    def __init__(self, dtype, mode=None, master=None):
        self.dtype, self.mode, self.master = dtype, mode, master
        self.model = None

    @property
    def tfinit(self):
        return self.mode is not None

    def _scope(self):
        return mp.scope(self.mode, compute_dtype=self.dtype, master=scope_master(self.master))

    def build(self, factory):
        if self.tfinit:
            with self._scope():
                self.model = factory()
        else:
            self.model = P.keras_mixed(factory, self.dtype)

    def masters(self):
        return I.masters_of(self.model) if self.tfinit else I.weights_of(self.model)

    def set_masters(self, arrays):
        if self.tfinit:
            mp.set_master_weights(self.model, arrays)
        else:
            self.model.set_weights(arrays)

    def compile(self, wrap):
        inner = keras.optimizers.Adam(1e-2)
        state = state_dtype(self.master) if self.tfinit else None
        optimizer = (mp.MasterWeightOptimizer(inner, state_dtype=state)
                     if self.tfinit and (wrap or state) else inner)
        self.model.compile(optimizer=optimizer, loss="mse")

    def early_stopping(self):
        cls = mp.EarlyStopping if self.tfinit else keras.callbacks.EarlyStopping
        return cls(monitor="loss", patience=0, restore_best_weights=True)

    def load_model(self, path):
        if self.tfinit:
            with self._scope():
                self.model = keras.models.load_model(path)
        else:
            self.model = keras.models.load_model(path)

    def checkpoint_save(self, path):
        """A checkpoint: ``tf.train.Checkpoint`` of the model and its optimizer on TensorFlow;
        elsewhere the model's state tree (what Keras's OrbaxCheckpoint writes; Keras's
        ``get_state_tree`` needs a compiled model), kept as numpy arrays."""
        if BACKEND == "tensorflow":
            import tensorflow as tf

            return tf.train.Checkpoint(model=self.model).write(path)
        tree = self.model.get_state_tree(value_format="numpy_array")
        del tree["metrics_variables"]
        return self.model.optimizer, tree

    def checkpoint_load(self, saved):
        if BACKEND == "tensorflow":
            import tensorflow as tf

            tf.train.Checkpoint(model=self.model).read(saved).assert_existing_objects_matched()
            return
        optimizer, tree = saved
        if self.model.optimizer is not optimizer:  # compiled again since: a new optimizer
            tree = {k: v for k, v in tree.items() if k != "optimizer_variables"}
        self.model.set_state_tree(tree)


class MasterInvariantMachine(RuleBasedStateMachine):
    """tfinit's model and its oracle, the same calls on both, the invariant after each."""

    config = None  # (mode, dtype, master): set by the test, one machine per configuration
    shift = 0  # draws taken before the others: each configuration's own derandomized stream

    @initialize(data=st.data())
    def build(self, data):
        """Build a drawn model twice from the same fp32 weights and compile both (Adam; the
        tfinit side wrapped in MasterWeightOptimizer by hand or by compile)."""
        data.draw(st.binary(min_size=self.shift, max_size=self.shift), label="shift")
        name = data.draw(st.sampled_from(DRAWN_MODELS), label="model")
        wrap = data.draw(st.booleans(), label="wrap")
        mode, dtype, master = self.config
        factory, x_shape, y_shape, x_int = MODELS[name]
        self.name, self.dtype, self.mode, self.master = name, dtype, mode, master
        self.side = _Side(dtype, mode, master)
        self.oracle = (_Side(dtype, mode, ORACLE_MASTER[master]) if master in ORACLE_MASTER
                       else _Side(dtype))
        keras.utils.set_random_seed(0)
        initial = P.keras_mixed(factory, dtype).get_weights()
        for side in (self.side, self.oracle):
            side.build(factory)
            side.set_masters(initial)
            side.compile(wrap)
        self.x, self.y = P.data(x_shape, y_shape, x_int=x_int)
        self.dir = tempfile.mkdtemp(prefix="tfinit-invariant-")
        self.saved = {}  # format -> (what load needs per side, the architecture it fits)
        self.stale = False  # trainable flags changed since the last compile
        self.lora = False
        self.ties = 0
        self.last, self.steps = "build", 0
        TALLY["build"] += 1
        TALLY[f"model {name}"] += 1
        self._check("build", self.side.masters())

    def teardown(self):
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)
        keras.backend.clear_session()

    # ------------------------------------------------------------------ the check

    def _how(self):
        return I.comparison(self.master, self.mode, lora=self.lora,
                            embedding=self.name == "tied_embedding")

    def _check(self, call, before):
        after, oracle = self.side.masters(), self.oracle.masters()
        how = self._how()
        self.ties += I.check(call, before, after, oracle, how, self.dtype)
        if how != I.BITWISE:
            # Carry on from the same masters (a tie, or a documented difference, is not
            # compounded by later calls).
            self.oracle.set_masters(list(after.arrays))
        if self.master == "fp32":
            P.assert_copies_synced(self.side.model)

    def _both(self, call, do):
        """``do(side)`` on tfinit's model and on the oracle, then the invariant."""
        before = self.side.masters()
        results = [do(side) for side in (self.side, self.oracle)]
        self.last = call
        self.steps += 1
        TALLY[call] += 1
        self._check(call, before)
        return results

    def _trainable(self):
        return self.side.model.compiled and not self.stale

    def _signature(self):
        return tuple((tuple(v.shape), bool(v.trainable)) for v in self.side.model.weights)

    # ------------------------------------------------------------------ the calls

    @rule(wrap=st.booleans())
    def compile(self, wrap):
        self._both("compile", lambda side: side.compile(wrap))
        self.stale = False

    @precondition(lambda self: self._trainable())
    @rule(epochs=st.integers(1, 2), validation=st.booleans(), callback=st.booleans())
    def fit(self, epochs, validation, callback):
        def fit(side):
            side.model.fit(
                self.x, self.y, batch_size=P.BATCH, epochs=epochs, shuffle=False, verbose=0,
                validation_data=(self.x[:P.BATCH], self.y[:P.BATCH]) if validation else None,
                callbacks=[side.early_stopping()] if callback else None)

        self._both("fit", fit)

    @precondition(lambda self: self.side.model.compiled)
    @rule()
    def evaluate(self):
        self._both("evaluate", lambda side: side.model.evaluate(
            self.x, self.y, batch_size=P.BATCH, verbose=0))

    @rule()
    def predict(self):
        self._both("predict", lambda side: side.model.predict(
            self.x, batch_size=P.BATCH, verbose=0))

    @precondition(lambda self: self._trainable())
    @rule(batch=st.integers(0, 2))
    def train_on_batch(self, batch):
        b = slice(batch * P.BATCH, (batch + 1) * P.BATCH)
        self._both("train_on_batch", lambda side: side.model.train_on_batch(self.x[b],
                                                                            self.y[b]))

    @precondition(lambda self: self.side.model.compiled)
    @rule()
    def test_on_batch(self):
        self._both("test_on_batch", lambda side: side.model.test_on_batch(
            self.x[:P.BATCH], self.y[:P.BATCH]))

    @rule()
    def predict_on_batch(self):
        self._both("predict_on_batch", lambda side: side.model.predict_on_batch(
            self.x[:P.BATCH]))

    @rule(training=st.booleans())
    def call(self, training):
        self._both("call", lambda side: side.model(self.x[:P.BATCH], training=training))

    def _layers(self):
        return [i for i, layer in enumerate(self.side.model.layers) if layer.weights]

    @rule(data=st.data(), trainable=st.booleans())
    def set_trainable(self, data, trainable):
        """Freeze or unfreeze a layer (Keras: compile again before training)."""
        index = data.draw(st.sampled_from(self._layers()), label="layer")

        def set_trainable(side):
            side.model.layers[index].trainable = trainable

        self._both("set_trainable", set_trainable)
        self.stale = True

    @precondition(lambda self: any(
        isinstance(layer, (L.Dense, L.Conv1D)) and not layer.lora_enabled
        for layer in self.side.model.layers))
    @rule(data=st.data())
    def enable_lora(self, data):
        index = data.draw(st.sampled_from([
            i for i, layer in enumerate(self.side.model.layers)
            if isinstance(layer, (L.Dense, L.Conv1D)) and not layer.lora_enabled]),
            label="layer")

        def enable(side):
            side.model.layers[index].enable_lora(
                2, a_initializer=keras.initializers.HeUniform(seed=index))

        self.lora = True
        self._both("enable_lora", enable)
        self.stale = True

    @rule(fmt=st.sampled_from([".keras", ".weights.h5", "checkpoint"]), then_load=st.booleans())
    def save(self, fmt, then_load):
        """Save in a drawn format; ``then_load``: load it back in the same step (so CI's few
        derandomized sequences reach a load; the ``load`` rule loads after later calls)."""
        if fmt == "checkpoint" and BACKEND != "tensorflow":
            assume(self.side.model.compiled)
        def save(side):
            path = os.path.join(self.dir, f"{'tfinit' if side is self.side else 'oracle'}"
                                          f"{self.steps}{fmt}")
            if fmt == ".keras":
                side.model.save(path)
            elif fmt == ".weights.h5":
                side.model.save_weights(path)
            else:
                return side.checkpoint_save(path)
            return path

        saved = self._both("save", save)
        self.saved[fmt] = (saved, None if fmt == ".keras" else self._signature(),
                           self.stale, self.lora)
        if then_load:
            self._load(fmt)

    @precondition(lambda self: any(signature in (None, self._signature())
                                   for _, signature, _, _ in self.saved.values()))
    @rule(data=st.data())
    def load(self, data):
        self._load(data.draw(st.sampled_from(sorted(
            fmt for fmt, (_, signature, _, _) in self.saved.items()
            if signature in (None, self._signature()))), label="format"))

    def _load(self, fmt):
        """Load what ``save`` wrote last in ``fmt`` (into the model as it is now, but for
        ``.keras``: the model as saved), on both sides, then the invariant."""
        saved, _, stale, lora = self.saved[fmt]

        def load(side):
            where = saved[0 if side is self.side else 1]
            if fmt == ".keras":
                side.load_model(where)
            elif fmt == ".weights.h5":
                side.model.load_weights(where)
            else:
                side.checkpoint_load(where)

        if fmt == ".keras":  # the model as it was saved, compiled as it was
            self.stale, self.lora = False, lora
        self._both("load", load)

    @rule(fresh=st.booleans())
    def set_weights(self, fresh):
        if fresh:
            arrays = self._fresh()
            self._both("set_weights", lambda side: side.model.set_weights(arrays))
        else:
            self._both("set_weights", lambda side: side.model.set_weights(
                side.model.get_weights()))

    @rule(fresh=st.booleans())
    def set_master_weights(self, fresh):
        arrays = self._fresh() if fresh else None

        def set_masters(side):
            side.set_masters(arrays if fresh else list(side.masters().arrays))

        self._both("set_master_weights", set_masters)

    def _fresh(self):
        """New fp32 weights: the oracle's scaled elementwise by draws from [0.5, 1.5)."""
        rng = np.random.default_rng(self.steps)
        return [np.asarray(w * rng.uniform(0.5, 1.5, size=w.shape), w.dtype)
                for w in self.oracle.masters().arrays]

    @invariant()
    def finite(self):
        if hasattr(self, "side"):
            assert all(np.all(np.isfinite(a)) for a in self.side.masters().arrays
                       if a.dtype.kind == "f"), f"a master is not finite after {self.last}"


#: what the sequences ran: models built, calls made (printed after each configuration)
TALLY = collections.Counter()


#: (backend, configuration): CI's sequences found a master lost there (xfail, not shrunk:
#: the shrunk sequence is in the reason)
KNOWN_FAILURES = {
    ("torch", ("pseudo_fp16", "float16", "fp32")): (
        "torch: tied_embedding, enable_lora on its Dense, save .keras and load it, twice: "
        "dense_1/kernel's master moves by 7.78e-05 on the load, Keras mixed's not at all"),
}


def _machine_cases():
    # not strict: whether CI's derandomized draws reach the failing sequence changes with
    # the rules' code (a fresh-clone run at d2f0967 drew none that fails)
    return [pytest.param(*c, id="-".join(c), marks=pytest.mark.xfail(
        strict=False, reason=KNOWN_FAILURES[BACKEND, c]) if (BACKEND, c) in KNOWN_FAILURES
        else ()) for c in CONFIGS]


@pytest.mark.slow  # about 2 minutes per backend on 2 cores
@pytest.mark.parametrize("mode, dtype, master", _machine_cases())
def test_master_invariant_over_drawn_sequences_of_calls(mode, dtype, master):
    """The invariant holds after every call of every drawn sequence, ``EXAMPLES`` sequences
    per backend shared by its configurations (Hypothesis shrinks a failure to a minimal
    sequence of calls and prints it)."""
    config = (mode, dtype, master)
    machine = type("MasterInvariantMachine", (MasterInvariantMachine,),
                   {"config": config, "shift": CONFIGS.index(config)})
    TALLY.clear()
    try:
        run_state_machine_as_test(machine, settings=settings(
            max_examples=max(1, EXAMPLES // len(CONFIGS)), stateful_step_count=STEPS,
            deadline=None, database=None,
            derandomize=os.environ.get("TFINIT_INVARIANT_RANDOM") != "1",
            suppress_health_check=list(HealthCheck), print_blob=True,
            # TFINIT_INVARIANT_SHRINK=0: report the first failing sequence as drawn
            phases=[p for p in Phase if p != Phase.shrink
                    or SHRINK and (BACKEND, config) not in KNOWN_FAILURES]))
    finally:
        print(f"{BACKEND} {mode} {dtype} {master}: {TALLY['build']} sequences, "
              f"{sum(TALLY.values()) - TALLY['build']} calls; {dict(sorted(TALLY.items()))}")


def _state_tree_cases():
    """CONFIGS; on TensorFlow, pseudo_fp16 expected to fail (strict): its masters are no
    optimizer variables there, so the tree holds the 16-bit copies and set_state_tree
    leaves the masters where fit took them (reported in issue 48's state-machine work)."""
    lost = pytest.mark.xfail(strict=True, reason="TensorFlow: the state tree holds the "
                             "pseudo_fp16 copies, not the masters")
    return [pytest.param(*c, id="-".join(c), marks=lost if BACKEND == "tensorflow"
                         and c[0] == "pseudo_fp16" and c[2] != "stochastic" else ())
            for c in CONFIGS]


@pytest.mark.parametrize("mode, dtype, master", _state_tree_cases())
def test_state_tree_round_trip_restores_the_masters(mode, dtype, master):
    """``get_state_tree`` (what Keras's OrbaxCheckpoint saves) after fit, then
    ``set_state_tree``, restores every master bit for bit. The machine found it failing on
    JAX and torch in reverse mode: the 16-bit copies, optimizer state, all had the path
    ``kernel_fp16``, so Keras refused the tree (a path found twice); they now sit beside
    their master (``sequential/dense/kernel_fp16``)."""
    with mp.scope(mode, compute_dtype=dtype, master=scope_master(master)):
        model = keras.Sequential([keras.Input((6,)), L.Dense(8), L.Dense(2)])
    inner = keras.optimizers.Adam(1e-2)
    model.compile(optimizer=mp.MasterWeightOptimizer(inner, state_dtype=state_dtype(master)),
                  loss="mse")
    x, y = P.data((6,), (2,))
    model.fit(x, y, batch_size=P.BATCH, verbose=0)
    tree = model.get_state_tree(value_format="numpy_array")
    saved = mp.get_master_weights(model)
    model.fit(x, y, batch_size=P.BATCH, verbose=0)
    assert any(a.tobytes() != b.tobytes() for a, b in zip(
        saved, mp.get_master_weights(model), strict=True))
    model.set_state_tree(tree)
    P.assert_bitwise(mp.get_master_weights(model), saved, P.names(model), "restored masters")


@pytest.mark.parametrize("mode, dtype, master", CONFIGS, ids=["-".join(c) for c in CONFIGS])
def test_set_weights_of_get_weights_keeps_every_master(mode, dtype, master):
    """``model.set_weights(model.get_weights())`` leaves every master bit-identical. The
    machine found JAX's split masters rounded to bfloat16 by it (48 of 48 kernel elements):
    a 16-bit value equal to the copy now keeps the remainder there too."""
    keras.utils.set_random_seed(0)
    with mp.scope(mode, compute_dtype=dtype, master=scope_master(master)):
        model = keras.Sequential([keras.Input((6,)), L.Dense(8), L.Dense(2)])
    before = mp.get_master_weights(model)
    # masters below 16-bit resolution, so a rounding would show (stochastic: no master)
    assert master == "stochastic" or any(
        a.astype(P.NP16[dtype]).astype(np.float32).tobytes() != a.tobytes() for a in before)
    model.set_weights(model.get_weights())
    P.assert_bitwise(mp.get_master_weights(model), before, P.names(model), "masters")
