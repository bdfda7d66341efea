"""fp32 master weights beside 16-bit compute copies (Caffe2's PseudoFP16, arXiv 1710.03740).

- ``scope(mode, compute_dtype)``: pair the variables created inside with fp32 masters.
- ``parameter_info(variable)``: the ``ParameterInfo`` (param + ``blob_copy``) of a pair.
- ``MasterWeightOptimizer(optimizer, loss_scale="dynamic")``: update masters, re-cast copies.
- ``sync_copies(model_or_variables)``: re-cast copies from masters by hand.
- ``Caffe2MomentumSGD``: Caffe2's MomentumSGDUpdate rule bit for bit (MultiPrecisionSgd when
  wrapped in MasterWeightOptimizer).
"""

from tfinit.mixed_precision._pairs import parameter_info, sync_copies
from tfinit.mixed_precision._creator import PseudoFP16Policy, scope
from tfinit.mixed_precision._optimizer import MasterWeightOptimizer
from tfinit.mixed_precision._caffe2_sgd import Caffe2MomentumSGD

__all__ = ["scope", "parameter_info", "MasterWeightOptimizer", "sync_copies",
           "Caffe2MomentumSGD", "PseudoFP16Policy"]
