"""Multi-node topologies built from one node's topology."""

from . import Topology


def distributed_fully_connected(gpus_per_node, num_copies, remote_bw=None):
    """`num_copies` copies of `gpus_per_node`, every GPU linked to every GPU of other nodes."""
    g = gpus_per_node.num_nodes()
    n = g * num_copies
    links = [[0] * n for _ in range(n)]
    for dst in range(n):
        for src in range(n):
            if src == dst:
                continue
            if src // g == dst // g:
                links[dst][src] = gpus_per_node.links[dst % g][src % g]
            else:
                links[dst][src] = 1
    return Topology(f"distributed_fully_connected({gpus_per_node.name},{num_copies})", links)


def distributed_hub_and_spoke(gpus_per_node, num_copies, remote_bw=None):
    """Like `distributed_fully_connected`: synth only restricts which pairs may talk."""
    return distributed_fully_connected(gpus_per_node, num_copies, remote_bw)
