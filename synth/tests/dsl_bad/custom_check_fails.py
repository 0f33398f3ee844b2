# expect: its check() fails on the program's final buffers
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
class Swap(Collective):
    def init_buffers(self):
        return [{Buffer.input: [Chunk(r, 0)], Buffer.output: [None]} for r in range(self.num_ranks)]

    def check(self, prog):
        return all(prog.buffers[r][Buffer.output][0] == Chunk(1 - r, 0) for r in range(2))


with MSCCLProgram("p", fully_connected(2), Swap(2, 1, False), 1):  # error here
    chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
    XML()
