# A custom collective marked in place: as in msccl-tools its input and output stay apart,
# so the program is compiled for distinct buffers. Rank r's chunks reach rank r+1's output.
# Args: RANKS INSTANCES
import sys

from msccl.collectives import Collective
from msccl.language import *
from msccl.topologies import ring


class ToNext(Collective):
    def init_buffers(self):
        f = self.chunk_factor
        return [{Buffer.input: [Chunk(r, i, r + 1, i) for i in range(f)],
                 Buffer.output: [None] * f} for r in range(self.num_ranks)]

    def check(self, prog):
        return all(prog.buffers[r][Buffer.output][i] == Chunk(r - 1, i)
                   for r in range(1, self.num_ranks) for i in range(self.chunk_factor))


n, instances = int(sys.argv[1]), int(sys.argv[2])
with MSCCLProgram("custom_inplace_tonext", ring(n), ToNext(n, 2, True), instances):
    for r in range(n - 1):
        c = chunk(r, Buffer.input, 0, 2)
        assert c.get_dst_rank() == r + 1
        c.copy(r + 1, Buffer.output, c.get_dst_index())
    XML()
    Check()
