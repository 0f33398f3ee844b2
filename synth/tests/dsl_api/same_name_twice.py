# Two programs with one name: each is compiled and written to a file of its own.
from msccl.language import *
from msccl.language.collectives import AllGather
from msccl.topologies import fully_connected

for hops in (1, 2):
    with MSCCLProgram("twice", fully_connected(3), AllGather(3, 1, False), 1):
        for r in range(3):
            chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
            c = chunk(r, Buffer.input, 0)
            if hops == 1:
                for d in range(3):
                    if d != r:
                        c.copy(d, Buffer.output, r)
            else:
                for k in (1, 2):
                    c = c.copy((r + k) % 3, Buffer.output, r)
        XML()
