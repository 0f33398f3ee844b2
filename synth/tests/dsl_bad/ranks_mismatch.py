# expect: has 4 ranks but the collective has 8
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(4), AllReduce(8, 1, True), 1):  # error here
    chunk(0, Buffer.input, 0).copy(1, Buffer.input, 0)
