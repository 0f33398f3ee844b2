"""MSCCLang's program interface: MSCCLProgram, chunk, Buffer, XML, Check, ...

Operations are recorded with the file and line that wrote them. Under `synth compile` (the
environment variable SYNTH_MSCCL_TRACE names a file) the record is written there as JSON and
synth compiles it. Run directly (`python3 prog.py`), XML() and Check() call the synth binary
(on PATH, or named by SYNTH) on the record.
"""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from enum import Enum

from msccl.language.collectives import *  # noqa: F401,F403 (MSCCLang re-exports them)

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TRACE = os.environ.get("SYNTH_MSCCL_TRACE")
_programs = []
_current = None
_SCRIPT = None  # set by msccl._run: the script whose lines errors should name


class Buffer(Enum):
    input = "input"
    output = "output"
    scratch = "scratch"

    def __str__(self):
        return self.value


class ThreadblockPolicy(Enum):
    auto = "auto"
    manual = "manual"


class ChannelPolicy(Enum):
    One = "One"
    MatchTopology = "MatchTopology"


class InstancePolicy(Enum):
    dup = "dup"


def _caller():
    """(file, line) of the first frame outside this package."""
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_PACKAGE):
        f = f.f_back
    if f is None:
        return ("<unknown>", 0)
    return (f.f_code.co_filename, f.f_lineno)


def _buffer_name(buffer):
    if isinstance(buffer, Buffer):
        return buffer.value
    if isinstance(buffer, str):
        return buffer
    # As in msccl-tools, any hashable value names a scratch buffer (e.g. a tuple of nodes).
    try:
        hash(buffer)
    except TypeError:
        raise TypeError(f"a buffer is Buffer.input, Buffer.output or a scratch name, not {buffer!r}") from None
    return repr(buffer)


def _int(x, what):
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"{what} must be an integer, not {x!r}")
    return x


class MSCCLProgram:
    def __init__(self, name, topo, collective, instances, protocol="Simple",
                 threadblock_policy=ThreadblockPolicy.auto, interleaved_replication=True,
                 instr_fusion=True, check_xml=True, dependence_nop=False,
                 instr_order="priority", **kwargs):
        self.name = name
        self.topo = topo
        self.collective = collective
        self.instances = _int(instances, "instances")
        self.protocol = protocol
        self.threadblock_policy = threadblock_policy
        self.interleaved_replication = interleaved_replication
        self.instr_fusion = instr_fusion
        self.check_xml = check_xml
        self.dependence_nop = dependence_nop
        # synth's addition: "program" keeps each threadblock in the written order.
        self.instr_order = instr_order
        self.num_ranks = collective.num_ranks
        if getattr(collective, "kind", "") is None and collective.init_buffers() is None:
            raise TypeError(f"custom collective {type(collective).__name__} defines no init_buffers() "
                            "(it gives each rank's initial input and output slots)")
        self.file, self.line = _caller()
        self.events = []
        self._scratch = {}
        self._live = None  # symbolic buffers, built when a program first asks for a chunk

    def __enter__(self):
        global _current
        if _current is not None:
            raise RuntimeError("MSCCLProgram blocks cannot be nested")
        _current = self
        _programs.append(self)
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        global _current
        _current = None
        return False

    def _describe(self):
        policy = self.threadblock_policy
        return {
            "name": self.name,
            "file": self.file,
            "line": self.line,
            "topology": self.topo._describe(),
            "collective": self.collective._describe(self.events),
            "instances": self.instances,
            "protocol": str(self.protocol),
            "threadblock_policy": policy.value if isinstance(policy, Enum) else str(policy),
            "interleaved_replication": bool(self.interleaved_replication),
            "instr_fusion": bool(self.instr_fusion),
            "dependence_nop": bool(self.dependence_nop),
            "instr_order": str(self.instr_order),
            "events": self.events,
        }

    def _record(self, event):
        event["file"], event["line"] = _caller()
        self.events.append(event)
        if self._live is not None:
            _apply(self._live, self.collective, event)

    def _chunk_at(self, rank, buffer, index):
        """What slot `index` of `rank`'s `buffer` holds now (a Chunk, ReduceChunk or None),
        following the program's copies and reduces as msccl-tools does."""
        if self._live is None:
            self._live = _initial_buffers(self.collective)
            for e in self.events:
                _apply(self._live, self.collective, e)
        name, index = _canon(self.collective, rank, _buffer_name(buffer), index)
        buf = self._live[rank].get(name, [])
        return buf[index] if 0 <= index < len(buf) else None

    def _scratch_len(self, rank, name):
        return self._scratch.get((rank, name), 0)

    def _grow(self, rank, name, end):
        if name not in ("input", "output"):
            self._scratch[(rank, name)] = max(self._scratch_len(rank, name), end)


def _canon(coll, rank, name, index):
    """msccl-tools' aliasing of a slot of `rank` (its collectives' get_buffer_index): in
    place, allreduce, alltoall and broadcast use the input for the output, allgather's input
    is the rank's slice of the output, reduce-scatter's output the rank's slice of the
    input; a custom collective keeps its buffers apart."""
    if not coll.inplace or coll.kind is None:
        return name, index
    f = coll.chunk_factor
    if coll.kind == "allgather":
        return ("output", index + rank * f) if name == "input" else (name, index)
    if coll.kind == "reducescatter":
        return ("input", index + rank * f) if name == "output" else (name, index)
    return ("input", index) if name == "output" else (name, index)


def _initial_buffers(coll):
    """Per rank, buffer name -> list of slot values at the start, as msccl-tools' collectives
    fill them: Chunk(origin rank, origin index, destination rank, destination index)."""
    if coll.kind is None:
        return [{getattr(k, "value", k): list(v) for k, v in b.items()} for b in coll.init_buffers()]
    n, f = coll.num_ranks, coll.chunk_factor
    state = []
    for r in range(n):
        if coll.kind == "alltoall":
            inp = [Chunk(r, k, k // f, k % f + r * f) for k in range(n * f)]
            out = [None] * (n * f)
        elif coll.kind == "allgather":
            inp = [Chunk(r, c, -1, r * f + c) for c in range(f)]
            out = [None] * (n * f)
            if coll.inplace:
                out[r * f:(r + 1) * f] = inp
        elif coll.kind == "reducescatter":
            inp = [Chunk(r, k, k // f, k % f) for k in range(n * f)]
            out = [None] * f
        else:  # allreduce, broadcast
            inp = [Chunk(r, c, -1, c) for c in range(f)]
            out = [None] * f
        state.append({"input": inp, "output": out})
    return state


def _apply(state, coll, e):
    """Applies one recorded copy or reduce to the symbolic buffers."""
    def slots(rank, name, index, size):
        name, index = _canon(coll, rank, name, index)
        buf = state[rank].setdefault(name, [])
        while len(buf) < index + size:
            buf.append(None)
        return buf, index

    if e["op"] == "copy":
        (sr, sb, si, n), (dr, db, di) = e["src"], e["dst"]
        src, si = slots(sr, sb, si, n)
        # msccl-tools names an in-place destination slot with the sender's rank.
        db, di = _canon(coll, sr, db, di)
        dst, di = slots(dr, db, di, n)
        dst[di:di + n] = src[si:si + n]
    elif e["op"] == "reduce":
        (dr, db, di, n), (sr, sb, si, _) = e["dst"], e["src"]
        src, si = slots(sr, sb, si, n)
        dst, di = slots(dr, db, di, n)
        for j in range(n):
            a, b = dst[di + j], src[si + j]
            if a is None or b is None:
                continue  # synth reports the empty slot when it compiles the program
            left = a.chunks if isinstance(a, ReduceChunk) else [a]
            right = b.chunks if isinstance(b, ReduceChunk) else [b]
            dst[di + j] = ReduceChunk(dr, left + right)


def _prog():
    if _current is None:
        raise RuntimeError("chunk operations must be inside `with MSCCLProgram(...):`")
    return _current


class Ref:
    """A reference to `size` consecutive chunk slots of one rank's buffer."""

    def __init__(self, prog, rank, buffer, index, size):
        self.prog = prog
        self.rank = rank
        self.buffer = buffer
        self.index = index
        self.size = size

    def _desc(self):
        return [self.rank, _buffer_name(self.buffer), self.index, self.size]

    def copy(self, dst, buffer=None, index=-1, sendtb=-1, recvtb=-1, ch=-1):
        _int(dst, "rank")
        if buffer is None:
            buffer = self.buffer
            if index == -1:
                index = self.index
        name = _buffer_name(buffer)
        if index == -1 and name not in ("input", "output"):
            index = self.prog._scratch_len(dst, name)  # the end of dst's scratch buffer
        elif index == -1:
            # msccl-tools keeps an explicit -1 for the input or output: in place it is offset by
            # the sender's rank slice (a slot of the chunk before it); else it names no slot.
            name, index = _canon(self.prog.collective, self.rank, name, index)
        _int(index, "index")
        self.prog._record({"op": "copy", "src": self._desc(), "dst": [dst, name, index],
                           "sendtb": sendtb, "recvtb": recvtb, "ch": ch})
        self.prog._grow(dst, name, index + self.size)
        # The slot as msccl-tools names it: in place, from the sender's rank slice.
        name, index = _canon(self.prog.collective, self.rank, name, index)
        return Ref(self.prog, dst, _buffer_of(name), index, self.size)

    def reduce(self, other, buffer=None, index=-1, sendtb=-1, recvtb=-1, ch=-1):
        if isinstance(other, Ref):
            self.prog._record({"op": "reduce", "dst": self._desc(), "src": other._desc(),
                               "sendtb": sendtb, "recvtb": recvtb, "ch": ch})
            return self
        # The older form reduce(dst_rank, buffer, index): dst <- dst + self.
        target = Ref(self.prog, _int(other, "rank"), buffer if buffer is not None else self.buffer,
                     self.index if index == -1 else index, self.size)
        self.prog._record({"op": "reduce", "dst": target._desc(), "src": self._desc(),
                           "sendtb": sendtb, "recvtb": recvtb, "ch": ch})
        return target

    def compute(self, expr, seed=0, **scalars):
        """synth's extension of MSCCLang (msccl-tools has no compute): applies the program's
        elementwise compute to these chunks, fully reduced output chunks, on their rank.
        `expr` is a preset ("adam", "sgd", "bias-dropout-residual") or statements ending in
        `out = ...`; keyword arguments are per-step scalars (lr=1e-3, step=1, ...) over the
        preset's defaults; `seed` seeds the dropout mask. Returns this reference."""
        if not isinstance(expr, str):
            raise TypeError(f"compute needs a preset name or statements as a string, not {expr!r}")
        _int(seed, "seed")
        if not 0 <= seed < 2 ** 64:
            raise ValueError(f"seed must be between 0 and 2**64 - 1, not {seed}")
        for name, value in scalars.items():
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok or value != value or value in (float("inf"), float("-inf")):
                raise TypeError(f"scalar {name} must be a finite number, not {value!r}")
        self.prog._record({"op": "compute", "chunk": self._desc(), "expr": expr,
                           "scalars": {k: float(v) for k, v in scalars.items()}, "seed": seed})
        return self

    def split(self, num):
        if num <= 0 or self.size % num:
            raise ValueError(f"cannot split {self.size} chunks into {num} equal parts")
        part = self.size // num
        return [Ref(self.prog, self.rank, self.buffer, self.index + k * part, part)
                for k in range(num)]

    def group(self, other):
        """The span from the lower of the two references to the end of the higher one, in
        either order (as msccl-tools)."""
        if other.rank != self.rank:
            raise ValueError(f"cannot group chunks of ranks {self.rank} and {other.rank}")
        if _buffer_name(other.buffer) != _buffer_name(self.buffer):
            raise ValueError(f"cannot group chunks of buffers {_buffer_name(self.buffer)} "
                             f"and {_buffer_name(other.buffer)}")
        first = min(self.index, other.index)
        end = max(self.index + self.size, other.index + other.size)
        return Ref(self.prog, self.rank, self.buffer, first, end - first)

    def _chunk(self, index):
        _int(index, "index")
        return self.prog._chunk_at(self.rank, self.buffer, self.index + index)

    def get_origin_index(self, index=0):
        """The input index the chunk at slot `index` of this reference started at."""
        return self._chunk(index).origin_index

    def get_origin_rank(self, index=0):
        """The rank the chunk at slot `index` of this reference started on."""
        return self._chunk(index).origin_rank

    def get_dst_index(self, index=0):
        """The output index the collective sends the chunk at slot `index` to."""
        return self._chunk(index).dst_index

    def get_dst_rank(self, index=0):
        """The rank the collective sends the chunk at slot `index` to (-1: every rank)."""
        return self._chunk(index).dst_rank

    def print_chunk_info(self, index=0):
        """Prints the chunk at slot `index` of this reference."""
        print(self._chunk(index))

    def __repr__(self):
        return f"Ref(rank={self.rank}, buffer={_buffer_name(self.buffer)}, index={self.index}, size={self.size})"


def _buffer_of(name):
    """Buffer.input / Buffer.output for their names, a scratch name as it is."""
    return Buffer(name) if name in ("input", "output") else name


def chunk(rank, buffer, index, size=1):
    """A reference to `size` slots of `rank`'s `buffer` starting at `index` (in place, the
    slot the collective aliases it to, as msccl-tools)."""
    prog = _prog()
    _int(rank, "rank")
    name, index = _canon(prog.collective, rank, _buffer_name(buffer), _int(index, "index"))
    return Ref(prog, rank, _buffer_of(name), index, _int(size, "size"))


def create_scratch(rank, name):
    """Declares a named scratch buffer (it grows as chunks are copied into it)."""
    _prog()._scratch.setdefault((rank, name), 0)
    return name


def _synth(args, program):
    exe = os.environ.get("SYNTH") or shutil.which("synth")
    if not exe:
        sys.exit("msccl: XML() and Check() need the synth binary: put it on PATH or set SYNTH")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([program._describe()], f)
        path = f.name
    try:
        return subprocess.run([exe, "compile", path] + args, capture_output=True, text=True)
    finally:
        os.unlink(path)


def XML():
    """Prints the program's MSCCL XML (compiled and verified by synth)."""
    prog = _prog()
    if _TRACE:
        prog._record({"op": "xml"})
        return
    flavor = os.environ.get("SYNTH_FLAVOR", "nccl")
    done = _synth(["--stdout", "--flavor", flavor], prog)
    if done.returncode != 0:
        sys.exit(done.stderr.strip())
    sys.stdout.write(done.stdout)


def Check():
    """Checks the collective's postcondition on the program so far; returns True if it holds."""
    prog = _prog()
    if _TRACE:
        if prog.collective.kind is None:
            # A custom collective's own check() runs here, on the buffers so far.
            ok = prog.collective._custom_check(prog.events)
            prog._record({"op": "check", "ok": ok})
            return ok
        prog._record({"op": "check"})
        return True
    done = _synth(["--check"], prog)
    ok = done.returncode == 0
    print("Check passed" if ok else "Check failed: " + done.stderr.strip(), file=sys.stderr)
    return ok


def Print():
    """Prints the number of recorded operations."""
    print(f"{len(_prog().events)} operations recorded", file=sys.stderr)


_failed = False  # set when the script raised: its first error is the one reported


def _write_trace():
    if _failed:
        return
    try:
        described = [p._describe() for p in _programs]
    except BaseException as e:  # a custom collective's own check() or init_buffers() failed
        _one_line_errors(type(e), e, e.__traceback__)
        sys.stderr.flush()
        os._exit(1)
    with open(_TRACE, "w") as f:
        json.dump(described, f)


def _one_line_errors(kind, value, tb):
    """Under synth compile, an exception becomes one line: file:line: type: message."""
    global _failed
    _failed = True
    where, mine = ("<unknown>", 0), None
    if isinstance(value, SyntaxError) and value.filename:
        where = mine = (value.filename, value.lineno or 0)
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename
        if os.path.abspath(f) == _SCRIPT:
            mine = (f, tb.tb_lineno)
        elif not os.path.abspath(f).startswith(_PACKAGE):
            where = (f, tb.tb_lineno)
        tb = tb.tb_next
    where = mine or where
    message = " ".join(str(value).split())
    sys.stderr.write(f"{where[0]}:{where[1]}: {kind.__name__}: {message}\n")


if _TRACE:
    atexit.register(_write_trace)
    sys.excepthook = _one_line_errors
