"""What ``replica_mismatches`` reports, from the replicas' values (numpy; either backend)."""


def mismatches(name, members, masters=None):
    """The disagreements of one variable or pair, as ``replica_mismatches`` words them.

    Args:
        name: the variable's Keras path.
        members: ``[(role, replicas)]``: each stored variable's role (``"variable"``,
            ``"copy"``, ``"master"``, ``"remainder"``) and its per-replica numpy values.
        masters: for a pair, the fp32 master on each replica (numpy), in the order of the
            copy's replicas; None for a plain variable or a pair whose copy is its master's
            top half by construction.

    Returns:
        A list of strings; ``[]`` when every replica agrees and each copy is ``cast(master)``.
    """
    problems = []
    for role, replicas in members:
        if any(replica.tobytes() != replicas[0].tobytes() for replica in replicas[1:]):
            problems.append(f"{name}: {role} differs between replicas")
    if masters is not None:
        copies = dict(members)["copy"]
        # strict=False: a master sharded over the devices (JAX's shard_over) is one whole
        # value against the copy's replicas; replica 0 stands for them all, as every replica
        # equals it (checked above).
        for replica, (copy, master) in enumerate(zip(copies, masters, strict=False)):
            if master.astype(copy.dtype).tobytes() != copy.tobytes():
                problems.append(f"{name}: copy != cast(master) on replica {replica}")
    return problems
