# A custom collective (a Collective subclass with its own init_buffers() and check()):
# every rank's input chunks end on the next rank of a ring, and the last rank also ends
# with the sum of every rank's chunk 0. It compiles to coll="custom" XML whose conditions
# (from init_buffers() and the final buffers) synth verifies and runs.
# Run: synth compile examples/dsl/custom_pipeline.py --out DIR -- 4 1
import argparse

from msccl.language import *
from msccl.language.collectives import Collective
from msccl.topologies import ring

parser = argparse.ArgumentParser()
parser.add_argument("num_gpus", type=int, help="ranks in the ring")
parser.add_argument("instances", type=int, help="copies of the program, each on its own channels")
parser.add_argument("--protocol", default="Simple", choices=["Simple", "LL", "LL128"])
args = parser.parse_args()


class ToNextAndSum(Collective):
    """Input: chunk_factor chunks per rank. Output slot i of rank r: rank r-1's input slot
    i; the last rank's extra output slot chunk_factor: the sum of every rank's slot 0."""

    def init_buffers(self):
        buffers = []
        for r in range(self.num_ranks):
            inputs = [Chunk(r, i) for i in range(self.chunk_factor)]
            buffers.append({Buffer.input: inputs, Buffer.output: [None] * (self.chunk_factor + 1)})
        return buffers

    def check(self, prog):
        n, f = self.num_ranks, self.chunk_factor
        for r in range(1, n):
            out = prog.buffers[r][Buffer.output]
            for i in range(f):
                if out[i] != Chunk(r - 1, i):
                    return False
        total = ReduceChunk(n - 1, [Chunk(r, 0) for r in range(n)])
        return prog.buffers[n - 1][Buffer.output][f] == total


n = args.num_gpus
f = 2
with MSCCLProgram("custom_pipeline", ring(n), ToNextAndSum(n, f, False),
                  args.instances, protocol=args.protocol):
    for r in range(n - 1):
        chunk(r, Buffer.input, 0, size=f).copy(r + 1, Buffer.output, 0)
    # The sum of every slot 0 travels the ring 0 -> 1 -> ... -> n-1.
    partial = chunk(0, Buffer.input, 0).copy(0, "sum", 0)
    for r in range(1, n):
        partial = partial.copy(r, "sum", 0)
        partial = partial.reduce(chunk(r, Buffer.input, 0))
    partial.copy(n - 1, Buffer.output, f)
    XML()
    Check()
