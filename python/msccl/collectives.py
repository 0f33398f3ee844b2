"""msccl-tools' `msccl.collectives`, for programs that import it: the collectives of
`msccl.language.collectives`. (Synthesizing algorithms for a collective is synth's main
command: `synth --topo T --coll C`.)"""

from msccl.language.collectives import (  # noqa: F401 (re-exported)
    AllGather,
    AllReduce,
    AllToAll,
    Broadcast,
    Chunk,
    Collective,
    ReduceChunk,
    ReduceScatter,
)
