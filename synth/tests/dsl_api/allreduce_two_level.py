# Two-level allreduce for NODES nodes of G GPUs, written as chains of chunk operations:
# every chunk is reduced along a ring of the GPUs of its node (ending at the GPU that owns
# it), then along the ring of the GPUs with that local index across nodes, then the total
# travels back the same way (across nodes, then around the node). Chunk c (of G x NODES per
# rank) is owned by local GPU c // NODES and crosses the network towards node c % NODES.
# The automatic schedule (default) leaves threadblocks and channels to the compiler; "manual"
# pins a channel per kind of ring (as a hand-tuned program would) for comparison.
# Args: G NODES SCHEDULE (auto|manual) INSTANCES
import sys

from msccl.language import *
from msccl.language.collectives import AllReduce
from msccl.topologies import fully_connected

g, nodes, instances = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])
manual = sys.argv[3] == "manual"
n = g * nodes
chunks = g * nodes


def pin(c):
    return {"ch": c} if manual else {}


def reduce_along(path, index, **kw):
    """Sums slot `index` of every rank of `path` into its last rank, hop by hop."""
    acc = chunk(path[0], Buffer.input, index)
    for r in path[1:]:
        acc = chunk(r, Buffer.input, index).reduce(acc, **kw)


def copy_along(path, index, **kw):
    """Sends slot `index` of the first rank of `path` to every other rank, hop by hop."""
    c = chunk(path[0], Buffer.input, index)
    for r in path[1:]:
        c = c.copy(r, Buffer.input, index, **kw)


def node_ring(node, last):
    """The GPUs of `node` in ring order, ending at local GPU `last`."""
    return [node * g + (last + 1 + k) % g for k in range(g)]


def cross_ring(local, last):
    """GPU `local` of every node in ring order, ending at node `last`."""
    return [((last + 1 + k) % nodes) * g + local for k in range(nodes)]


with MSCCLProgram("allreduce_two_level", fully_connected(n), AllReduce(n, chunks, True),
                  instances):
    owner = [c // nodes for c in range(chunks)]
    for node in range(nodes):
        for c in range(chunks):
            reduce_along(node_ring(node, owner[c]), c, **pin(c % nodes))
    for c in range(chunks):
        reduce_along(cross_ring(owner[c], c % nodes), c, **pin(2 * nodes + owner[c] % 2))
    for c in range(chunks):
        path = cross_ring(owner[c], c % nodes)
        copy_along(path[-1:] + path[:-1], c, **pin(2 * nodes + owner[c] % 2))
    for node in range(nodes):
        for c in range(chunks):
            ring = node_ring(node, owner[c])
            copy_along(ring[-1:] + ring[:-1], c, **pin(nodes + c % nodes))
    XML()
    Check()
