# expect: NameError
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllGather(2, 1, False), 1):
    chunk(0, Buffer.input, undefined_index)  # error here
