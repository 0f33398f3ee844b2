# expect: rank must be an integer
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllReduce(2, 2, True), 1):
    chunk("zero", Buffer.input, 0)  # error here
