# expect: rank 9 does not exist
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(4), AllReduce(4, 1, True), 1):
    chunk(9, Buffer.input, 0).copy(1, Buffer.input, 0)  # error here
