"""What ``tfinit.mixed_precision`` does the same way on every backend (no TensorFlow, no JAX):
the one backend choice, the pair kinds and the pairing rule, the scope stack, the dtype
policy, the optimizer core, the hooks a scope leaves on layers and models, weight files,
shard layouts and the replica report. Private: the package module is the public face."""
