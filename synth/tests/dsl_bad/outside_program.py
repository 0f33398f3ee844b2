# expect: must be inside
from msccl.language import *
from msccl.language.collectives import *
from msccl.topologies import *
chunk(0, Buffer.input, 0)  # error here
