# In-place allgather around the DGX-1's NVLink ring 0-1-3-2-6-7-5-4 (msccl.topologies.nvidia):
# the first hop copies to Buffer.input, which msccl-tools places at the *sender's* output
# slot; the other hops forward the returned reference. Chunks are copied in a grouped span
# built in reverse order. Args: INSTANCES
import sys

from msccl.language import *
from msccl.language.collectives import AllGather
from msccl.topologies.nvidia import dgx1

instances = int(sys.argv[1])
ring = [0, 1, 3, 2, 6, 7, 5, 4]
n, f = 8, 2
with MSCCLProgram("allgather_inplace_dgx1", dgx1(), AllGather(n, f, True), instances):
    for i, r in enumerate(ring):
        second = chunk(r, Buffer.input, 1)
        first = chunk(r, Buffer.input, 0)
        both = second.group(first)  # the span of slots 0..2, whichever comes first
        assert (both.index, both.size) == (r * f, 2)
        c = both.copy(ring[(i + 1) % n], Buffer.input, 0)
        assert c.get_origin_rank() == r and c.get_origin_index(1) == 1
        for hop in range(2, n):
            c = c.copy(ring[(i + hop) % n])
    XML()
    Check()
