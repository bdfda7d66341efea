"""Caffe2's training pieces as Keras objects, on every backend: its ``LearningRate`` policies
as a schedule (``schedules``) and its ``MomentumSGDUpdate`` as an optimizer
(``momentum_sgd``). ``tfinit.caffe2`` and ``tfinit.mixed_precision`` (peers, neither imports
the other) re-export them; their Keras serialization names are tfinit 0.1.0's.
"""

from tfinit._caffe2_training.schedules import Caffe2LearningRate, learning_rate
from tfinit._caffe2_training.schedules import policies as learning_rate_policies
from tfinit._caffe2_training.momentum_sgd import Caffe2MomentumSGD

__all__ = ["Caffe2LearningRate", "Caffe2MomentumSGD", "learning_rate", "learning_rate_policies"]
