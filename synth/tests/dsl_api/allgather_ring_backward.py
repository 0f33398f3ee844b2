# Allgather around a ring in decreasing rank order, out of place, automatic threadblocks:
# each rank first copies its own input chunks into its output on the rank (local work that
# needs no message), then each chunk travels backwards through every other rank. The local
# copies get a threadblock of their own, beside the ring's transfers (on a transfer's
# threadblock they delayed it); copies of the program add no slowdown.
# Args: RANKS CHUNKS INSTANCES
import sys

from msccl.language import *
from msccl.language.collectives import AllGather
from msccl.topologies import fully_connected

n, f, instances = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
with MSCCLProgram("allgather_ring_backward", fully_connected(n), AllGather(n, f, False),
                  instances):
    for r in range(n):
        for i in range(f):
            c = chunk(r, Buffer.input, i).copy(r, Buffer.output, r * f + i)
            for hop in range(1, n):
                c = c.copy((r - hop) % n, Buffer.output, r * f + i)
    XML()
    Check()
