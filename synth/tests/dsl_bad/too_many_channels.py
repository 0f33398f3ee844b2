# expect: one instance needs 17 channels, so 2 instances need 34, more than the runtimes' 32
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllGather(2, 1, False), 2,  # error here
                  threadblock_policy=ThreadblockPolicy.manual):
    chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0, sendtb=0, recvtb=0, ch=16)
    chunk(1, Buffer.input, 0).copy(0, Buffer.output, 1, sendtb=1, recvtb=1, ch=0)
    chunk(0, Buffer.input, 0).copy(0, Buffer.output, 0, sendtb=1, recvtb=1)
    chunk(1, Buffer.input, 0).copy(1, Buffer.output, 1, sendtb=1, recvtb=1)
