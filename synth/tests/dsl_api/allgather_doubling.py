# Recursive-doubling allgather, in place, with manual threadblocks: in round k every rank
# swaps the 2^k chunks it has gathered so far with the rank 2^k away (rank XOR 2^k). Each
# rank talks to one peer per round on the threadblock named after that peer, which both
# sends and receives. Rounds after the first move several chunks in one operation, whose
# copies would span rank slices: with several instances synth compiles one copy instead.
# Args: RANKS (a power of two) POLICY (manual|auto) INSTANCES
import sys

from msccl.language import *
from msccl.language.collectives import AllGather
from msccl.topologies import fully_connected

n, policy, instances = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
manual = policy == "manual"
tb_policy = ThreadblockPolicy.manual if manual else ThreadblockPolicy.auto


def swap(r, width):
    partner = r ^ width
    start = r - r % width  # the block of `width` ranks r belongs to
    pins = dict(sendtb=partner, recvtb=r) if manual else {}
    chunk(r, Buffer.output, start, size=width).copy(partner, Buffer.output, start, **pins)


with MSCCLProgram("allgather_doubling", fully_connected(n), AllGather(n, 1, True), instances,
                  threadblock_policy=tb_policy):
    width = 1
    while width < n:
        for r in range(n):
            swap(r, width)
        width *= 2
    XML()
    Check()
