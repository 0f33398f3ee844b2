# expect: different sizes
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllReduce(2, 2, True), 1):
    chunk(1, Buffer.input, 0, size=2).reduce(chunk(0, Buffer.input, 0))  # error here
