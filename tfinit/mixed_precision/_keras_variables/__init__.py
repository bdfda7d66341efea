"""``tfinit.mixed_precision`` on the ``keras.Variable`` backends, JAX and torch: no variable
creator, pairs made from built layers; the optimizer's stateless step, the scope's steps,
ZeRO-1's layouts on JAX (``shard_layouts``). What JAX and torch do differently is in ``jax``
and ``torch`` (one of them chosen in ``active``). Private: the package module is the public
face; the same module names as ``_tensorflow`` where both backends define a thing."""
