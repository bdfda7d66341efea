"""fp32 master weights beside 16-bit compute copies (Caffe2's PseudoFP16, arXiv 1710.03740).

- ``scope(mode, compute_dtype)``: pair the variables created inside with fp32 masters.
- ``parameter_info(variable)``: the ``ParameterInfo`` (param + ``blob_copy``) of a pair.
- ``MasterWeightOptimizer(optimizer, loss_scale="dynamic")``: update masters, re-cast copies.
- ``sync_copies(model_or_variables)``: re-cast copies from masters by hand.
- ``Caffe2MomentumSGD``: Caffe2's MomentumSGDUpdate rule bit for bit (MultiPrecisionSgd when
  wrapped in MasterWeightOptimizer).

Checkpoints keep the masters: ``tf.train.Checkpoint`` (Keras models, optimizers and raw
``tf.Module``s alike) stores a paired variable's fp32 master under its own key;
``.weights.h5``/``.keras`` store the master as the variable's value. Restores set the
masters bit-exactly and re-cast the copies; fp32 weights of the same architecture load
into a pseudo_fp16 model exactly (fine-tuning). Load a pseudo_fp16 ``.keras`` file inside
the scope (outside it raises); restoring masters into a plain 16-bit model through
``tf.train.Checkpoint`` raises (dtype mismatch). Build models before restoring
(deferred restoration into not-yet-created variables is not supported).
Known limit: ``load_weights`` of a ``.weights.h5`` into a plain 16-bit Keras model casts
the fp32 masters as Keras does for any fp32 file; tfinit cannot see that load.
"""

from tfinit.mixed_precision._pairs import parameter_info, sync_copies
from tfinit.mixed_precision._creator import PseudoFP16Policy, scope
from tfinit.mixed_precision._optimizer import MasterWeightOptimizer
from tfinit.mixed_precision._caffe2_sgd import Caffe2MomentumSGD

__all__ = ["scope", "parameter_info", "MasterWeightOptimizer", "sync_copies",
           "Caffe2MomentumSGD", "PseudoFP16Policy"]
