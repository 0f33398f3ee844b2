# Allgather on a DGX-1 in 2 steps and 2 rounds, the least-steps optimum synth's SMT search
# finds (`synth --topo dgx1 --coll allgather --least-steps`). A DGX-1 is two fully linked
# quads {0,1,2,3} and {4,5,6,7} with rank r linked to rank r^4 across.
# Step 1: every rank sends its chunk to its 3 quad mates and to its partner r^4.
# Step 2: every rank forwards its partner's chunk to its 3 quad mates.
# Run: synth compile examples/dsl/allgather_dgx1.py --out DIR -- 1
import argparse

from msccl.language import *
from msccl.language.collectives import AllGather
from msccl.topologies import dgx1

parser = argparse.ArgumentParser()
parser.add_argument("instances", type=int)
parser.add_argument("--protocol", default="Simple", choices=["Simple", "LL", "LL128"])
args = parser.parse_args()


def quad(r):
    base = r & ~3
    return [base + k for k in range(4) if base + k != r]


with MSCCLProgram("allgather_dgx1", dgx1(), AllGather(8, 1, False),
                  args.instances, protocol=args.protocol):
    for r in range(8):
        mine = chunk(r, Buffer.input, 0)
        mine.copy(r, Buffer.output, r)
        for peer in quad(r) + [r ^ 4]:
            mine.copy(peer, Buffer.output, r)
    for r in range(8):
        partner = chunk(r, Buffer.output, r ^ 4)
        for peer in quad(r):
            partner.copy(peer, Buffer.output, r ^ 4)
    XML()
    Check()
