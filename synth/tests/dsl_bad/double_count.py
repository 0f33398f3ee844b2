# expect: twice
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllReduce(2, 1, True), 1):
    chunk(0, Buffer.input, 0).copy(0, "tmp", 0)
    chunk(1, Buffer.input, 0).reduce(chunk(0, Buffer.input, 0))
    chunk(1, Buffer.input, 0).reduce(chunk(0, "tmp", 0))  # error here
