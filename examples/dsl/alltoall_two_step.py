# Two-step alltoall for 2 nodes of G GPUs (default 8). Chunks for a GPU on the other node are
# first gathered on the local GPU with the same local index as the destination, which then
# sends all G of them in one transfer over its own NIC: G times fewer, G times larger
# messages across the network than a direct alltoall.
# Run: synth compile examples/dsl/alltoall_two_step.py --out DIR -- 8 1
import argparse

from msccl.language import *
from msccl.language.collectives import AllToAll
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

with MSCCLProgram("alltoall_two_step", topology, AllToAll(n, 1, False),
                  args.instances, protocol=args.protocol):
    for src in range(n):
        src_node, src_local = divmod(src, g)
        for dst in range(n):
            dst_node, dst_local = divmod(dst, g)
            c = chunk(src, Buffer.input, dst)
            if dst_node == src_node:
                c.copy(dst, Buffer.output, src)
            else:
                # Step 1: park it on the relay, slot = the sender's local index.
                relay = src_node * g + dst_local
                c.copy(relay, f"to_node{dst_node}", src_local)
    # Step 2: each relay ships its G parked chunks to its peer on the other node, straight
    # into the output slots of the G senders (consecutive, since they share a node).
    for relay in range(n):
        node, local = divmod(relay, g)
        for other in range(nodes):
            if other != node:
                parked = chunk(relay, f"to_node{other}", 0, size=g)
                parked.copy(other * g + local, Buffer.output, node * g)
    XML()
    Check()
