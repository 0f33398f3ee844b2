# expect: no link 0 -> 2
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", ring(4), AllGather(4, 1, False), 1):
    chunk(0, Buffer.input, 0).copy(2, Buffer.output, 0)  # error here
