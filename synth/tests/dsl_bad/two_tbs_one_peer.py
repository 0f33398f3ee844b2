# expect: both send to rank 1 on channel 0
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllGather(2, 2, False), 1,
                  threadblock_policy=ThreadblockPolicy.manual):
    chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0, sendtb=0, recvtb=0)
    chunk(0, Buffer.input, 1).copy(1, Buffer.output, 1, sendtb=1, recvtb=1)  # error here
