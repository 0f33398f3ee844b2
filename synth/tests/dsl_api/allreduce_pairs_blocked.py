# One-step allreduce with manual threadblocks: every rank sends its whole buffer to every
# other rank's scratch in one message, then reduces locally. Copies are laid out slice after
# slice (interleaved_replication=False), so each send stays one message per instance and two
# ranks that both send before they receive never fill their connections.
# Args: RANKS INSTANCES
import sys

from msccl.language import *
from msccl.language.collectives import AllReduce
from msccl.topologies import fully_connected

n, instances = int(sys.argv[1]), int(sys.argv[2])
with MSCCLProgram("allreduce_pairs_blocked", fully_connected(n), AllReduce(n, n, True), instances,
                  interleaved_replication=False, threadblock_policy=ThreadblockPolicy.manual):
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
