"""The collectives a program implements: AllReduce, AllGather, ReduceScatter, AllToAll,
Broadcast. Each fixes buffer sizes, the initial input and the postcondition; synth checks
the postcondition (Check()) and verifies the compiled program against it."""


class Collective:
    """Base class. `kind` names the collective for synth."""

    kind = None

    def __init__(self, num_ranks, chunk_factor, inplace, root=0):
        self.num_ranks = num_ranks
        self.chunk_factor = chunk_factor
        self.inplace = inplace
        self.root = root
        self.name = self.kind or type(self).__name__

    def _describe(self):
        if self.kind is None:
            return {"kind": "custom:" + type(self).__name__}
        return {
            "kind": self.kind,
            "ranks": self.num_ranks,
            "chunk_factor": self.chunk_factor,
            "inplace": bool(self.inplace),
            "root": self.root,
        }


class AllReduce(Collective):
    """Every output slot i is the sum over ranks of input slot i."""

    kind = "allreduce"


class AllGather(Collective):
    """Output slot r*chunk_factor+i holds rank r's input slot i."""

    kind = "allgather"


class ReduceScatter(Collective):
    """Rank r's output slot i is the sum over ranks of input slot r*chunk_factor+i."""

    kind = "reducescatter"


class AllToAll(Collective):
    """Output slot s*chunk_factor+i of rank d holds input slot d*chunk_factor+i of rank s."""

    kind = "alltoall"


class Broadcast(Collective):
    """Every rank's output holds the root's input."""

    kind = "broadcast"

    def __init__(self, num_ranks, chunk_factor, inplace, root=0):
        super().__init__(num_ranks, chunk_factor, inplace, root)
