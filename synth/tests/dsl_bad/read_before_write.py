# expect: before it is written
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllGather(2, 1, False), 1):
    chunk(0, Buffer.output, 1).copy(1, Buffer.output, 1)  # error here
