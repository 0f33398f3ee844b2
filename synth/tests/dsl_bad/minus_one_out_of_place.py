# expect: index -1 is negative
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(4), AllGather(4, 1, False), 1):
    chunk(0, Buffer.input, 0).copy(1, Buffer.output, -1)  # error here
