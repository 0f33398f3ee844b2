# expect: custom collective Mine defines no init_buffers()
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
class Mine(Collective):
    pass


with MSCCLProgram("p", fully_connected(2), Mine(2, 1, False), 1):  # error here
    chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
