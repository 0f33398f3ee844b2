"""The collectives a program implements: AllReduce, AllGather, ReduceScatter, AllToAll,
Broadcast. Each fixes buffer sizes, the initial input and the postcondition; synth checks
the postcondition (Check()) and verifies the compiled program against it."""


class Chunk:
    """Input slot `origin_index` of rank `origin_rank` (what an input slot holds at the start;
    `dst_rank`/`dst_index` are informative only)."""

    def __init__(self, origin_rank, origin_index, dst_rank=-1, dst_index=-1):
        self.origin_rank = origin_rank
        self.origin_index = origin_index
        self.dst_rank = dst_rank
        self.dst_index = dst_index

    def _key(self):
        return ((self.origin_rank, self.origin_index),)

    def __eq__(self, other):
        return isinstance(other, (Chunk, ReduceChunk)) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return (f"Chunk(origin_rank={self.origin_rank}, origin_index={self.origin_index}, "
                f"dst_rank={self.dst_rank}, dst_index={self.dst_index})")


class ReduceChunk:
    """The reduction of several input chunks (`chunks`, a list of Chunk)."""

    def __init__(self, creation_rank, chunks):
        self.creation_rank = creation_rank
        self.chunks = list(chunks)

    def _key(self):
        return tuple(sorted(k for c in self.chunks for k in c._key()))

    def __eq__(self, other):
        return isinstance(other, (Chunk, ReduceChunk)) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def reduce(self, other):
        return ReduceChunk(self.creation_rank, self.chunks + [other])

    def __repr__(self):
        return f"ReduceChunk({self.chunks})"


def _parts(value):
    """The input chunks a slot value combines, as [rank, index] pairs."""
    return [list(k) for k in value._key()]


class Collective:
    """Base class. `kind` names the collective for synth; a subclass without `kind` is a
    custom collective: `init_buffers()` returns, per rank, a dict {Buffer.input: [...],
    Buffer.output: [...]} of initial slot values (Chunk or None), and `check(prog)` inspects
    `prog.buffers[rank][Buffer.output][index]` at the end and returns True if it is right.
    synth takes the program's final output slots as the postcondition the compiled program
    is verified against, and refuses a program whose check() fails."""

    kind = None

    def __init__(self, num_ranks, chunk_factor, inplace, root=0):
        self.num_ranks = num_ranks
        self.chunk_factor = chunk_factor
        self.inplace = inplace
        self.root = root
        self.name = self.kind or "custom"

    def init_buffers(self):
        return None

    def check(self, prog):
        return True

    def get_buffer_index(self, rank, buffer, index):
        return buffer, index

    def _custom_state(self, events):
        """The symbolic buffers after `events`: per rank, a dict of buffer name -> list."""
        bufs = self.init_buffers()
        if bufs is None or len(bufs) != self.num_ranks:
            raise ValueError(f"{type(self).__name__}.init_buffers() must return one dict per rank")
        state = []
        for rank_bufs in bufs:
            state.append({getattr(k, "value", k): list(v) for k, v in rank_bufs.items()})
        # msccl-tools keeps a custom collective's input and output apart, in place or not.
        def slots(rank, name, index, size):
            buf = state[rank].setdefault(name, [])
            while len(buf) < index + size:
                buf.append(None)
            return buf

        for e in events:
            if e["op"] == "copy":
                (sr, sb, si, n), (dr, db, di) = e["src"], e["dst"]
                src = slots(sr, sb, si, n)
                dst = slots(dr, db, di, n)
                dst[di:di + n] = src[si:si + n]
            elif e["op"] == "reduce":
                (dr, db, di, n), (sr, sb, si, _) = e["dst"], e["src"]
                src = slots(sr, sb, si, n)
                dst = slots(dr, db, di, n)
                for j in range(n):
                    a, b = dst[di + j], src[si + j]
                    if a is None or b is None:
                        raise ValueError(f"reduce of an empty slot on rank {dr}")
                    left = a.chunks if isinstance(a, ReduceChunk) else [a]
                    right = b.chunks if isinstance(b, ReduceChunk) else [b]
                    dst[di + j] = ReduceChunk(dr, left + right)
        return state

    def _custom_check(self, events):
        """Runs the collective's own check() on the buffers after `events`."""
        from msccl.language import Buffer  # the enum lives there

        state = self._custom_state(events)

        class _View:
            pass

        view = _View()
        view.num_ranks = self.num_ranks
        view.buffers = []
        for rank in state:
            d = {}
            for name, values in rank.items():
                d[name] = values
                if name in ("input", "output"):
                    d[Buffer(name)] = values
            view.buffers.append(d)
        return bool(self.check(view))

    def _describe(self, events=()):
        if self.kind is None:
            init = self.init_buffers()
            if init is None:
                raise ValueError(f"{type(self).__name__} must define init_buffers()")
            sizes = {"input": 0, "output": 0}
            pre = []
            for rank, rank_bufs in enumerate(init):
                for key, values in rank_bufs.items():
                    name = getattr(key, "value", key)
                    if name in sizes:
                        sizes[name] = max(sizes[name], len(values))
                    if name != "input":
                        continue
                    for index, value in enumerate(values):
                        if isinstance(value, Chunk) and (value.origin_rank, value.origin_index) != (rank, index):
                            pre.append({"rank": rank, "chunk": index,
                                        "value": {"rank": value.origin_rank, "chunk": value.origin_index}})
            state = self._custom_state(events)
            post = []
            for rank, bufs in enumerate(state):
                out = bufs.get("output", [])
                for index, value in enumerate(out[:sizes["output"]]):
                    if value is not None:
                        post.append({"rank": rank, "chunk": index,
                                     "sum": [{"rank": r, "chunk": i} for r, i in _parts(value)]})
            return {
                "kind": "custom:" + type(self).__name__,
                "ranks": self.num_ranks,
                "chunk_factor": self.chunk_factor,
                "inplace": bool(self.inplace),
                "root": 0,
                "custom": {"input_chunks": sizes["input"], "output_chunks": sizes["output"],
                           "pre": pre, "post": post},
                "check_ok": self._custom_check(events),
            }
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
