"""tfinit under ``tf.distribute``: the custom-loop step, replica-consistency and TPU checks.

tfinit rides on TensorFlow's own distribution engine; nothing here distributes anything.
The rules that keep master/copy pairs consistent on every replica and worker:

- Build the model (and the optimizer) inside
  ``with strategy.scope(), tfinit.mixed_precision.scope(...):``. The scope's variable
  creator then runs once per logical variable and both the fp32 master and the 16-bit copy
  are distributed variables (``MirroredVariable`` under MirroredStrategy and
  MultiWorkerMirroredStrategy). Entering the tfinit scope outside ``strategy.scope()``
  raises ``ValueError``; so does training, with ``MasterWeightOptimizer``, variables that
  the training strategy did not create; mixing two strategies raises TensorFlow's
  ``RuntimeError``. Replicas never diverge silently.
- Initial values: a distributed variable is initialised once and that value is copied to
  every replica (MirroredStrategy evaluates the initializer on the first device;
  MultiWorkerMirroredStrategy broadcasts the chief's value). A tfinit fill therefore
  gives every replica the same values, seeded or not, and a seeded fill gives the values it
  gives on one device. In pseudo_fp16 the fill runs in float32 for the master and the
  copy is its cast, as Caffe2's PseudoFP16Initializer did.
- Each step, ``MasterWeightOptimizer`` unscales the 16-bit gradients and casts them to
  fp32; the inner Keras optimizer sums them across replicas and workers (an fp32
  all-reduce) and applies the same update to every replica's master; every copy is
  re-cast; a non-finite gradient on any replica skips the step on all of them.

TPUStrategy needs (checked on CPU by ``forbidden_ops`` and XLA compilation in the tests):
variables created inside ``strategy.scope()`` (never inside the step); a step with no host
callbacks (``tf.py_function``, ``tf.numpy_function``, ``tf.print``, numpy or Python
values computed from tensors); static shapes (``drop_remainder=True`` batches); no float64.
``compute_dtype="bfloat16"`` is the TPU's native 16-bit type (under multi-worker
MultiWorkerMirroredStrategy it is refused: TensorFlow cannot broadcast bfloat16 initial
values between workers). The master-weight step (unscale, finite check, the shared skip
decision, ``tf.cond``, inner update, re-cast) is made of XLA-compilable TensorFlow ops.
"""

import tensorflow as tf

from tfinit.mixed_precision import replica_mismatches  # noqa: F401  (public here too)

# Ops that call back into the Python host or only run on a CPU host: TPUStrategy cannot
# compile them into the step (tf.print would need outside compilation, a host round trip).
HOST_OPS = frozenset({
    "PyFunc", "PyFuncStateless", "EagerPyFunc", "PrintV2", "Print", "StringFormat",
})


def train_step(strategy, model, optimizer, loss_fn, global_batch_size):
    """A ``tf.function`` ``step(x, y)`` training ``model`` once on every replica.

    Each replica computes ``loss_fn(y, float32 predictions)`` per example, averages it over
    the *global* batch, scales it with ``optimizer.scale_loss`` inside the tape and passes
    the gradients to ``optimizer.apply_gradients`` (``MasterWeightOptimizer`` unscales them
    and updates the fp32 masters). ``step`` returns the loss summed over replicas. It is the
    loop Keras 3's ``fit`` cannot run under MultiWorkerMirroredStrategy.
    """

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            predictions = tf.cast(model(x, training=True), tf.float32)
            per_example = loss_fn(y, predictions)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def step(x, y):
        return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)

    return step


def mean_squared_error(y_true, y_pred):
    """Per-example mean squared error over the last axis (a ``loss_fn`` for ``train_step``)."""
    return tf.reduce_mean(tf.square(y_pred - y_true), axis=-1)


def _graph_nodes(graph_def):
    yield from graph_def.node
    for function in graph_def.library.function:
        yield from function.node_def


def forbidden_ops(function, *args, **kwargs):
    """Trace ``function`` (a ``tf.function``) and list what TPUStrategy would refuse.

    Returns sorted ``(op_type, node_name, reason)`` tuples for host callbacks
    (``HOST_OPS``), variables created while tracing the step (``VarHandleOp``; trace a
    fresh ``tf.function``, a cached trace creates nothing) and float64 tensors, searched
    in the step's graph and every function it calls (cond/while branches,
    ``strategy.run`` bodies).
    """
    if not hasattr(function, "get_concrete_function"):
        raise TypeError("forbidden_ops: argument `function` must be a tf.function (decorate "
                        "the train step with @tf.function). Received: "
                        f"function={type(function).__name__}")
    found = set()

    def record(next_creator, **kw):  # tf.function lifts such variables out of the graph
        variable = next_creator(**kw)
        found.add(("VarHandleOp", variable.name, "variable created inside the step"))
        return variable

    with tf.variable_creator_scope(record):
        graph_def = function.get_concrete_function(*args, **kwargs).graph.as_graph_def()
    for node in _graph_nodes(graph_def):
        if node.op in HOST_OPS:
            found.add((node.op, node.name, "host callback"))
        elif node.op == "VarHandleOp":
            found.add((node.op, node.name, "variable created inside the step"))
        elif any(attr.type == tf.float64.as_datatype_enum
                 for key, attr in node.attr.items() if key in ("T", "dtype", "DstT", "SrcT")):
            found.add((node.op, node.name, "float64 (unsupported on TPU)"))
    return sorted(found)
