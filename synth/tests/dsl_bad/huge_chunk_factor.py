# expect: 8 ranks x chunk_factor 4611686018427387904: a buffer may hold at most 32768 chunks
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(8), AllGather(8, 2**62, False), 1):  # error here
    pass
