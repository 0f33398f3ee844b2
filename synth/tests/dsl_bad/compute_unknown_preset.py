# expect: not adam, sgd, bias-dropout-residual
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
with MSCCLProgram("p", fully_connected(2), AllReduce(2, 1, False), 1):
    chunk(0, Buffer.input, 0).copy(0, Buffer.output, 0)
    total = chunk(0, Buffer.output, 0).reduce(chunk(1, Buffer.input, 0))
    total.compute("adamw")  # error here
