# Allreduce by recursive halving then recursive doubling, with manual threadblocks. Each rank
# starts with every chunk's slot; in each halving round it keeps half of its current range
# and hands the other half to the rank `d` away (rank XOR d), which adds it in; after the
# last round each rank holds the total of one chunk. The doubling rounds then swap
# the totals back, each range growing twice as large. On both sides a threadblock is named
# after the peer it talks to, so it sends and receives, and from the second round on every
# operation moves several chunks at once.
# Args: RANKS (a power of two) INSTANCES
import sys

from msccl.language import *
from msccl.language.collectives import AllReduce
from msccl.topologies import fully_connected

n, instances = int(sys.argv[1]), int(sys.argv[2])

with MSCCLProgram("allreduce_halving_doubling", fully_connected(n), AllReduce(n, n, True),
                  instances, threadblock_policy=ThreadblockPolicy.manual):
    span = {r: (0, n) for r in range(n)}  # the range of chunks each rank is responsible for
    d = n // 2
    while d >= 1:
        nxt = {}
        for r in range(n):
            lo, hi = span[r]
            mid = (lo + hi) // 2
            nxt[r] = (lo, mid) if r & d == 0 else (mid, hi)
        for r in range(n):
            peer = r ^ d
            lo, hi = nxt[r]
            # r adds in peer's copy of the half r keeps.
            chunk(r, Buffer.input, lo, hi - lo).reduce(
                chunk(peer, Buffer.input, lo, hi - lo), sendtb=r, recvtb=peer)
        span = nxt
        d //= 2
    d = 1
    while d < n:
        for r in range(n):
            peer = r ^ d
            lo, hi = span[r]
            chunk(r, Buffer.input, lo, hi - lo).copy(peer, Buffer.input, lo, sendtb=peer, recvtb=r)
        for r in range(n):
            lo, hi = span[r]
            plo, phi = span[r ^ d]
            span[r] = (min(lo, plo), max(hi, phi))
        d *= 2
    XML()
    Check()
