# expect: already receives from rank 1
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(3), AllGather(3, 1, False), 1,
                  threadblock_policy=ThreadblockPolicy.manual):
    chunk(1, Buffer.input, 0).copy(0, Buffer.output, 1, sendtb=0, recvtb=0)
    chunk(2, Buffer.input, 0).copy(0, Buffer.output, 2, sendtb=0, recvtb=0)  # error here
