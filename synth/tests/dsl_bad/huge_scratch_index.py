# expect: scratch buffer 'sc'[4611686018427387904..4611686018427387905] of rank 1 is beyond the 32768 chunks a buffer may hold
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllGather(2, 1, False), 1):
    chunk(0, Buffer.input, 0).copy(1, 'sc', 2**62)  # error here
