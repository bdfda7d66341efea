"""fp32 master weights beside 16-bit compute copies (Caffe2's PseudoFP16, arXiv 1710.03740).

The house: ``_common/`` (every backend; it asks none), ``_tensorflow/`` (Keras's TensorFlow
backend: a variable creator makes the pairs) and ``_keras_variables/`` (JAX and torch: pairs
made from built layers; ``jax``/``torch`` hold what each does its own way, ``shard_layouts``
JAX's ZeRO-1); the backend is chosen once (``_backend_choice``, whose folder
``_chosen_backend`` imports). Where a thing differs by backend, both folders have a module of
the same name. ``scope`` (``_scope``) and ``MasterWeightOptimizer`` (``_optimizer``) are
each written once, over the chosen folder's ``scope_steps`` and ``BackendOptimizer``.

The concepts, one line each (their modules in brackets):

- scope / ScopeState: one entered scope = its PairSpec, strategy and policy [``_scope``;
  each folder's ``scope_steps``; ``_common/scope_stack``, ``_common/scope_hooks``].
- PairPolicy: the dtype policy of layers constructed in a scope; it carries the rules
  [``_common/pair_policy``].
- which variables pair up, and the pair record: the one record on a paired variable, a
  ParameterInfo (param, blob_copy) whose kind (pseudo_fp16, reverse, split) is decided once,
  when the pair is made [``_common/pair_kinds``: the rule and the roles, every backend; each
  folder's ``pair_records``: how a master is read and written there].
- the public functions over pairs (parameter_info, sync_copies, the master weights, files,
  replicas): one code path over the chosen backend's pair functions [``_master_weights``,
  ``_replicas``, ``_chosen_backend``].
- PairedVariable: the Keras variable a layer holds: computes 16-bit, writes reach the master;
  MasterVariable (TensorFlow): the fp32 master as the Keras variable the inner optimizer
  updates [each folder's ``paired_variables``].
- the split master: bfloat16 copy + int16 remainder, no fp32 variable [tfinit._split_master].
- the stochastic pair: the bfloat16 weight, no master; its hash and rounding
  [tfinit._stochastic_rounding].
- MasterWeightOptimizer: scale, unscale in fp32, update masters, re-cast copies
  [``_optimizer``; ``_common/optimizer_core``; each folder's ``optimizer``, its step].
- the save hooks: every save format stores a pair's fp32 master [each folder's
  ``save_hooks``, ``_common/weight_files``].

The public names:

- ``scope(mode, compute_dtype, master="fp32")``: pair the variables of layers constructed
  inside with fp32 masters, whenever those layers build (``master="split"``, bfloat16
  pseudo_fp16 only: the bfloat16 copy plus an int16 remainder hold the master, exactly but
  for one float32 ulp in a rare tie; no fp32 variable between steps; ``master="stochastic"``,
  bfloat16 pseudo_fp16 only: no master, the bfloat16 weight takes the optimizer's fp32
  update with stochastic rounding, 2 bytes per parameter).
- ``parameter_info(variable)``: the ``ParameterInfo`` (param + ``blob_copy``) of a pair.
- ``PairPolicy`` (``PseudoFP16Policy``, tfinit 0.1's name): the dtype policy of the layers.
- ``MasterWeightOptimizer(optimizer, loss_scale="auto", state_dtype=None, shard_over=None,
  seed=0)`` (``seed``: stochastic rounding's):
  update masters, re-cast copies (``"auto"``: dynamic loss scaling for float16, none for
  bfloat16, as Keras's mixed policies; ``state_dtype="bfloat16"``: the inner optimizer's
  per-variable state in bfloat16; ``shard_over="batch"``, JAX: ZeRO-1, masters and state
  sharded over that mesh axis).
- ``get_master_weights`` / ``set_master_weights``: the master-aware ``get/set_weights``.
- ``save_weights(model, path, dtype=None)``: a plain Keras ``.weights.h5`` in one dtype.
- ``EarlyStopping``: restores the best masters exactly.
- ``sync_copies(model_or_variables)``: re-cast copies from masters by hand.
- ``replica_mismatches(model_or_variables)``: where local replicas of pairs disagree.
- ``Caffe2MomentumSGD``: Caffe2's MomentumSGDUpdate rule bit for bit (MultiPrecisionSgd when
  wrapped in MasterWeightOptimizer).

The rule: a layer computes with the 16-bit copy; everything that stores, regularizes,
constrains, decays, averages or optimizes a weight uses its fp32 master, as Keras's mixed
policies do (penalties, constraints, the optimizer's state keyed by variable, a layer's own
non-trainable state, configs and files). ``compile`` on a model constructed in a scope wraps a
plain optimizer in ``MasterWeightOptimizer``; a plain optimizer reaching paired variables any
other way is refused at its first step.

Reads of a paired variable (``numpy()``, ``np.asarray``, ``get_weights`` ...) give its own
dtype and value. Every save format keeps the masters: ``tf.train.Checkpoint`` stores a
pseudo_fp16 variable's fp32 master under its key; ``.weights.h5``/``.keras`` store masters
through the layers' ``save_own_variables``; ``tf.saved_model.save``/``model.export`` write
what each variable is, so artifacts load and serve. Restores set masters bit-exactly; fp32
weights of the same architecture load into a pseudo_fp16 model exactly (fine-tuning).
"""

# scope and MasterWeightOptimizer are written once over the chosen backend's steps.
from tfinit.mixed_precision._optimizer import MasterWeightOptimizer
from tfinit.mixed_precision._scope import scope
from tfinit.mixed_precision._common.pair_policy import PairPolicy, PseudoFP16Policy
from tfinit.mixed_precision._master_weights import (get_master_weights, parameter_info,
                                                    save_weights, set_master_weights,
                                                    sync_copies)
from tfinit.mixed_precision._callbacks import EarlyStopping
from tfinit._caffe2_training import Caffe2MomentumSGD
from tfinit.mixed_precision._replicas import replica_mismatches

__all__ = ["scope", "parameter_info", "MasterWeightOptimizer", "sync_copies",
           "get_master_weights", "set_master_weights", "save_weights", "EarlyStopping",
           "Caffe2MomentumSGD", "PairPolicy", "PseudoFP16Policy", "replica_mismatches"]
