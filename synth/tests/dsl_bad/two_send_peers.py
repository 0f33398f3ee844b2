# expect: already sends to rank 1
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(3), AllGather(3, 1, False), 1,
                  threadblock_policy=ThreadblockPolicy.manual):
    chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0, sendtb=0, recvtb=0)
    chunk(0, Buffer.input, 0).copy(2, Buffer.output, 0, sendtb=0, recvtb=0)  # error here
