# Hierarchical allreduce for 2 nodes of G GPUs (default 8): all-pairs reduce-scatter inside
# each node, an exchange between the GPUs with the same local index across nodes, and an
# all-pairs allgather inside each node. Only 1/G of the data crosses the network per GPU.
# Run: synth compile examples/dsl/allreduce_hierarchical.py --out DIR -- 8 1
# Simulate on two DGX-A100: synth simulate DIR/allreduce_hierarchical.xml --topo dgx-a100x2
import argparse

from msccl.language import *
from msccl.language.collectives import AllReduce
from msccl.topologies import fully_connected
from msccl.topologies.distributed import distributed_fully_connected

parser = argparse.ArgumentParser()
parser.add_argument("gpus_per_node", type=int)
parser.add_argument("instances", type=int)
parser.add_argument("--protocol", default="Simple", choices=["Simple", "LL", "LL128"])
args = parser.parse_args()

g = args.gpus_per_node
nodes = 2
n = g * nodes
topology = distributed_fully_connected(fully_connected(g), nodes, 25)


def rank(node, local):
    return node * g + local


with MSCCLProgram("allreduce_hierarchical", topology, AllReduce(n, g, True),
                  args.instances, protocol=args.protocol):
    # 1. Inside each node, local GPU l collects chunk l from its node mates and sums it.
    for node in range(nodes):
        for l in range(g):
            for m in range(g):
                if m != l:
                    chunk(rank(node, m), Buffer.input, l).copy(rank(node, l), "local", m)
            total = chunk(rank(node, l), Buffer.input, l)
            for m in range(g):
                if m != l:
                    total.reduce(chunk(rank(node, l), "local", m))
    # 2. GPU l of each node swaps its node's partial sum of chunk l with GPU l of the other.
    for l in range(g):
        for node in range(nodes):
            other = 1 - node
            chunk(rank(node, l), Buffer.input, l).copy(rank(other, l), "remote", 0)
        for node in range(nodes):
            chunk(rank(node, l), Buffer.input, l).reduce(chunk(rank(node, l), "remote", 0))
    # 3. Inside each node, GPU l sends the total of chunk l to its node mates.
    for node in range(nodes):
        for l in range(g):
            for m in range(g):
                if m != l:
                    chunk(rank(node, l), Buffer.input, l).copy(rank(node, m), Buffer.input, l)
    XML()
    Check()
