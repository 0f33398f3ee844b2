# expect: instances 0 is not between 1 and 32
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllGather(2, 1, False), 0):  # error here
    chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
