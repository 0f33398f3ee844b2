# Ring allreduce for one 8-GPU NVSwitch box (any N): chunk i is summed around the ring
# starting at rank i, then the finished sum travels the ring once more.
# Run: synth compile examples/dsl/allreduce_ring.py --out DIR -- 8 1
import argparse

from msccl.language import *
from msccl.language.collectives import AllReduce
from msccl.topologies import fully_connected

parser = argparse.ArgumentParser()
parser.add_argument("num_gpus", type=int, help="ranks in the ring")
parser.add_argument("instances", type=int, help="copies of the program, each on its own channels")
parser.add_argument("--protocol", default="Simple", choices=["Simple", "LL", "LL128"])
args = parser.parse_args()

n = args.num_gpus
with MSCCLProgram("allreduce_ring", fully_connected(n), AllReduce(n, n, True),
                  args.instances, protocol=args.protocol):
    for i in range(n):
        # Reduce-scatter half: the partial sum of chunk i moves from rank i to rank i-1.
        partial = chunk(i, Buffer.input, i)
        for hop in range(1, n):
            partial = chunk((i + hop) % n, Buffer.input, i).reduce(partial)
        # Allgather half: the rank holding the total passes it on to the other n-1 ranks.
        for hop in range(n, 2 * n - 1):
            partial = partial.copy((i + hop) % n, Buffer.input, i)
    XML()
    Check()
