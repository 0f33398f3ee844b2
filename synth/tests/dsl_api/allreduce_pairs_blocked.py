# One-step allreduce with manual threadblocks: every rank sends its whole buffer to every
# other rank's scratch in one message, then reduces locally. Copies laid out slice after
# slice (LAYOUT blocked: interleaved_replication=False) keep each send one message per
# instance, so two ranks that both send before they receive never fill their connections;
# interleaved copies would cut each send into single chunks, which do fill them, so synth
# lays them out slice after slice as well (LAYOUT interleaved).
# Args: RANKS LAYOUT INSTANCES
import sys

from msccl.language import *
from msccl.language.collectives import AllReduce
from msccl.topologies import fully_connected

n, layout, instances = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
with MSCCLProgram("allreduce_pairs_blocked", fully_connected(n), AllReduce(n, n, True), instances,
                  interleaved_replication=layout == "interleaved", threadblock_policy=ThreadblockPolicy.manual):
    for r in range(n):
        for peer in range(n):
            if peer != r:
                chunk(r, Buffer.input, 0, n).copy(peer, "inbox", r * n, sendtb=peer, recvtb=r)
    for r in range(n):
        for peer in range(n):
            if peer != r:
                for k in range(n):
                    chunk(r, Buffer.input, k).reduce(chunk(r, "inbox", peer * n + k), sendtb=k)
    XML()
    Check()
