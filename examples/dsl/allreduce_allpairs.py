# All-pairs allreduce for one 8-GPU NVSwitch box (any N): two communication steps instead of
# a ring's 2(N-1), which wins for small and medium messages on a switch.
# Rank r owns chunk r: it gathers everyone's chunk r, sums it, and sends the sum to everyone.
# Run: synth compile examples/dsl/allreduce_allpairs.py --out DIR -- 8 1
import argparse

from msccl.language import *
from msccl.language.collectives import AllReduce
from msccl.topologies import fully_connected

parser = argparse.ArgumentParser()
parser.add_argument("num_gpus", type=int)
parser.add_argument("instances", type=int)
parser.add_argument("--protocol", default="Simple", choices=["Simple", "LL", "LL128"])
args = parser.parse_args()

n = args.num_gpus
with MSCCLProgram("allreduce_allpairs", fully_connected(n), AllReduce(n, n, True),
                  args.instances, protocol=args.protocol,
                  threadblock_policy=ThreadblockPolicy.manual):
    # Step 1: every peer's copy of chunk r lands in rank r's scratch (one slot per peer).
    # Threadblock p of a rank talks to rank p, in both directions.
    for r in range(n):
        for peer in range(n):
            if peer != r:
                chunk(peer, Buffer.input, r).copy(r, "gathered", peer, sendtb=r, recvtb=peer)
    # Rank r sums the copies into its own chunk r.
    for r in range(n):
        total = chunk(r, Buffer.input, r)
        for peer in range(n):
            if peer != r:
                total.reduce(chunk(r, "gathered", peer), sendtb=peer)
    # Step 2: rank r sends the sum of chunk r to every other rank.
    for r in range(n):
        for peer in range(n):
            if peer != r:
                chunk(r, Buffer.input, r).copy(peer, Buffer.input, r, sendtb=peer, recvtb=r)
    XML()
    Check()
