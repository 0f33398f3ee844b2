# expect: AttributeError: 'Ref' object has no attribute 'send'
# The script fails first; its custom collective's check() would fail too when the trace is
# written, but the first error is the one reported.
from msccl.language import *
from msccl.language.collectives import Collective
from msccl.topologies import *


class Broken(Collective):
    def init_buffers(self):
        return [{Buffer.input: [Chunk(r, 0)], Buffer.output: [None]} for r in range(2)]

    def check(self, prog):
        return ReduceChunk([])  # wrong arguments: raises


with MSCCLProgram("p", fully_connected(2), Broken(2, 1, False), 1):
    chunk(0, Buffer.input, 0).send(1, Buffer.output, 0)  # error here
    XML()
