# expect: is negative
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(4), AllReduce(4, 4, True), 1):
    chunk(0, Buffer.input, 0).copy(1, Buffer.input, -3)  # error here
