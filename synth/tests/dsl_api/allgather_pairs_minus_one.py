# In-place allgather in two steps on a fully connected fabric: the ranks of each pair swap
# their chunks, then every rank sends its pair's two chunks to its counterpart in every
# other pair. Odd ranks name that block with index -1 (msccl-tools' explicit -1 for the
# input, offset by the rank's slice: the slot just before its own). Args: RANKS INSTANCES
import sys

from msccl.language import *
from msccl.language.collectives import AllGather
from msccl.topologies import fully_connected

n, instances = int(sys.argv[1]), int(sys.argv[2])
assert n % 2 == 0
with MSCCLProgram("allgather_pairs_minus_one", fully_connected(n), AllGather(n, 1, True), instances):
    for r in range(n):
        chunk(r, Buffer.input, 0).copy(r ^ 1, Buffer.input, 0)
    for r in range(n):
        first = -1 if r % 2 else 0
        block = chunk(r, Buffer.input, first, 2)
        assert (block.index, block.size) == (r - r % 2, 2)
        for peer in range(r % 2, n, 2):
            if peer // 2 != r // 2:
                c = block.copy(peer, Buffer.input, first)
                assert c.index == r - r % 2 and c.get_origin_rank(1) == r - r % 2 + 1
    XML()
    Check()
