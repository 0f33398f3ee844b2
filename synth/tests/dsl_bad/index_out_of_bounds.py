# expect: out of bounds
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(4), AllReduce(4, 1, True), 1):
    chunk(0, Buffer.input, 5).copy(1, Buffer.input, 0)  # error here
