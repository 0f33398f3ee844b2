# Alltoall over relays: each input chunk asks its collective where it goes (get_dst_rank,
# get_dst_index); chunks for other ranks wait in a relay's scratch first, one scratch buffer
# per origin rank named by a tuple (msccl-tools takes any hashable scratch name). Also imports
# msccl.collectives (msccl-tools' module) and checks get_origin_*.
# Args: RANKS INSTANCES
import sys

import msccl.collectives  # noqa: F401 (msccl-tools programs import it)
from msccl.language import *
from msccl.language.collectives import AllToAll
from msccl.topologies import fully_connected

n, instances = int(sys.argv[1]), int(sys.argv[2])
with MSCCLProgram("alltoall_by_destination", fully_connected(n), AllToAll(n, 1, False),
                  instances):
    for r in range(n):
        for k in range(n):
            c = chunk(r, Buffer.input, k)
            dst, at = c.get_dst_rank(), c.get_dst_index()
            assert (dst, at) == (k, r), (dst, at)
            relay = (r + 1) % n
            if dst not in (r, relay):
                # Two hops: through the next rank's scratch.
                c = c.copy(relay, ("relay", r), k)
            out = c.copy(dst, Buffer.output, at)
            assert (out.get_origin_rank(), out.get_origin_index()) == (r, k)
    chunk(0, Buffer.output, 0).print_chunk_info()
    XML()
    Check()
