# expect: overlap
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllReduce(2, 4, True), 1):
    chunk(0, Buffer.input, 0, size=2).copy(0, Buffer.input, 1)  # error here
