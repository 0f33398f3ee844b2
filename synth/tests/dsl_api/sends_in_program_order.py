# Manual threadblocks where ordering ready instructions by priority fills a connection: rank
# 0 sends three chunks to rank 1's output slot 0 on one threadblock and channel: A (after a
# local copy), then B and C (ready at once). Rank 1 saves A before B overwrites it. Taken by
# priority, the ready sends B and C go first; rank 1 cannot receive B before A, and A cannot
# be sent while B and C fill the connection. The compiler then lists the instructions in
# program order (A first), which never fills a connection.
# Args: INSTANCES
import sys

from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *

instances = int(sys.argv[1])
with MSCCLProgram("sends_in_program_order", fully_connected(2), AllGather(2, 2, False),
                  instances, threadblock_policy=ThreadblockPolicy.manual):
    chunk(0, Buffer.input, 0).copy(0, "s", 0, sendtb=1)
    chunk(0, "s", 0).copy(1, Buffer.output, 0, sendtb=0, recvtb=0)
    chunk(1, Buffer.output, 0).copy(1, "t", 0, sendtb=1)
    chunk(0, Buffer.input, 1).copy(1, Buffer.output, 0, sendtb=0, recvtb=0)
    chunk(0, Buffer.input, 0).copy(1, "u", 0, sendtb=0, recvtb=0)
    chunk(1, Buffer.output, 0).copy(1, Buffer.output, 1, sendtb=1)
    chunk(1, "t", 0).copy(1, Buffer.output, 0, sendtb=1)
    for i in range(2):
        chunk(0, Buffer.input, i).copy(0, Buffer.output, i, sendtb=1)
        chunk(1, Buffer.input, i).copy(1, Buffer.output, 2 + i, sendtb=1)
        chunk(1, Buffer.input, i).copy(0, Buffer.output, 2 + i, sendtb=0, recvtb=0)
    XML()
    Check()
