//! The program builder: records chunk operations, executes them symbolically (so a read of
//! an unwritten slot or a copy along a missing link is reported at the line that wrote it),
//! and hands the recorded operations to the compiler. Both front ends use it: the Rust API
//! here, and the Python trace replayed by [`super::trace`].

use super::collective::{Buffer, Collective, MAX_BUFFER_CHUNKS};
use super::error::{DslError, DslResult, Loc};
use super::Options;
use runtime::compute::Compute;
use runtime::ir;
use runtime::semantics::Contribution;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

/// Which rank pairs may exchange data (MSCCLang's topology only restricts pairs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connectivity {
    /// Topology name, for messages.
    pub name: String,
    /// Number of ranks.
    pub ranks: usize,
    /// Directed pairs (src, dst) with a link.
    pub links: BTreeSet<(usize, usize)>,
    /// A synth topology spec (`dgx1`, `ring:8`) the program can be simulated on, if known.
    pub spec: Option<String>,
}

impl Connectivity {
    /// The pairs of a synth topology.
    pub fn of(topology: &crate::topology::Topology, spec: &str) -> Connectivity {
        Connectivity {
            name: topology.name.clone(),
            ranks: topology.ranks,
            links: topology.links.iter().map(|l| (l.src, l.dst)).collect(),
            spec: Some(spec.to_string()),
        }
    }

    /// Loads a synth topology by name or file (`dgx1`, `fully-connected:8`, `my.toml`).
    pub fn load(spec: &str) -> anyhow::Result<Connectivity> {
        Ok(Connectivity::of(&crate::topology::load(spec)?, spec))
    }

    /// Every ordered pair of distinct ranks.
    pub fn fully_connected(ranks: usize) -> Connectivity {
        Connectivity {
            name: format!("fully_connected({ranks})"),
            ranks,
            links: (0..ranks)
                .flat_map(|u| (0..ranks).filter(move |&v| v != u).map(move |v| (u, v)))
                .collect(),
            spec: Some(format!("fully-connected:{ranks}")),
        }
    }
}

/// A value in a slot: the sorted multiset of input chunks summed into it, then
/// [`COMPUTED`] once the program's compute applied to it.
pub(crate) type Value = Vec<Contribution>;

/// The mark a compute leaves on a value (it sorts after every real contribution).
const COMPUTED: Contribution = Contribution {
    rank: usize::MAX,
    chunk: usize::MAX,
};

/// A physical buffer of one rank after aliasing: input, output, or scratch buffer number k.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum PBuf {
    /// The input buffer.
    Input,
    /// The output buffer.
    Output,
    /// Scratch buffer number k (named by the program, or [`TEMP`](super::dag::TEMP)).
    Scratch(usize),
}

/// A run of `size` slots of one rank's physical buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PRef {
    /// The rank.
    pub rank: usize,
    /// The buffer.
    pub buf: PBuf,
    /// The first slot.
    pub index: usize,
    /// The number of slots.
    pub size: usize,
}

impl PRef {
    /// Every (rank, buffer, slot) of the run.
    pub fn slots(&self) -> impl Iterator<Item = (usize, PBuf, usize)> + '_ {
        (self.index..self.index + self.size).map(move |i| (self.rank, self.buf, i))
    }
}

/// Threadblock and channel pins of one operation (`sendtb`, `recvtb`, `ch`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pins {
    /// Threadblock on the sending rank (also the one of a local operation).
    pub sendtb: Option<usize>,
    /// Threadblock on the receiving rank.
    pub recvtb: Option<usize>,
    /// Channel.
    pub ch: Option<usize>,
}

/// A recorded operation, on physical buffers.
#[derive(Debug, Clone)]
pub(crate) struct Operation {
    /// True for `reduce` (`dst ← dst ⊕ src`), false for `copy` (`dst ← src`).
    pub reduce: bool,
    /// True for `compute` (the program's [`Compute`] applied to `dst`, which is `src`).
    pub compute: bool,
    /// What is read.
    pub src: PRef,
    /// What is written.
    pub dst: PRef,
    /// Its pins.
    pub pins: Pins,
    /// Where it was written.
    pub loc: Loc,
}

/// The state of a program being traced.
#[derive(Debug)]
pub(crate) struct Tracer {
    /// The program's name.
    pub name: String,
    /// Its collective.
    pub collective: Collective,
    /// The links it may use.
    pub topology: Connectivity,
    /// Its compile options.
    pub options: Options,
    /// Where `MSCCLProgram` (or `Program::new`) was written.
    pub loc: Loc,
    /// Scratch buffer names, indexed by `PBuf::Scratch(k)`.
    pub scratch_names: Vec<String>,
    /// Per rank, the scratch buffers in order of first use and their sizes.
    pub scratch: Vec<Vec<(usize, usize)>>,
    state: HashMap<(usize, PBuf, usize), Value>,
    /// The operations so far, in program order.
    pub ops: Vec<Operation>,
    /// The program's compute and where it was first applied (synth's `.compute(...)`).
    pub compute: Option<(Compute, Loc)>,
}

impl Tracer {
    /// An empty program; an error when the collective and the topology differ in ranks or
    /// `instances` is 0.
    pub fn new(
        name: &str,
        topology: Connectivity,
        collective: Collective,
        options: Options,
        loc: Loc,
    ) -> DslResult<Tracer> {
        if topology.ranks != collective.ranks {
            return Err(DslError::new(
                &loc,
                format!(
                    "the topology {} has {} ranks but the collective has {}",
                    topology.name, topology.ranks, collective.ranks
                ),
            ));
        }
        let most = runtime::limits::Limits::PORTABLE.max_channels;
        if options.instances == 0 || options.instances > most {
            return Err(DslError::new(
                &loc,
                format!(
                    "instances {} is not between 1 and {most} (each instance takes its own channels)",
                    options.instances
                ),
            ));
        }
        let mut state = HashMap::new();
        let semantics = collective.semantics();
        for rank in 0..collective.ranks {
            for i in 0..collective.size(ir::Buffer::Input) {
                let (buf, index) = collective.resolve(rank, ir::Buffer::Input, i);
                // A custom collective may start a slot with another rank's chunk.
                state.insert(
                    (rank, pbuf(buf), index),
                    vec![semantics.initial_input(rank, i)],
                );
            }
        }
        Ok(Tracer {
            name: name.to_string(),
            scratch: vec![Vec::new(); collective.ranks],
            collective,
            topology,
            options,
            loc,
            scratch_names: Vec::new(),
            state,
            ops: Vec::new(),
            compute: None,
        })
    }

    /// Resolves a logical reference (rank, buffer, index, size) to physical slots, checking
    /// bounds; scratch buffers grow to fit when `grow`.
    fn resolve(
        &mut self,
        rank: usize,
        buffer: &Buffer,
        index: usize,
        size: usize,
        grow: bool,
        loc: &Loc,
    ) -> DslResult<PRef> {
        let n = self.collective.ranks;
        if rank >= n {
            return Err(DslError::new(
                loc,
                format!("rank {rank} does not exist (the program has {n} ranks)"),
            ));
        }
        if size == 0 {
            return Err(DslError::new(loc, "a chunk reference needs size >= 1"));
        }
        let logical = match buffer {
            Buffer::Input => ir::Buffer::Input,
            Buffer::Output => ir::Buffer::Output,
            Buffer::Scratch(name) => {
                let k = match self.scratch_names.iter().position(|s| s == name) {
                    Some(k) => k,
                    None => {
                        self.scratch_names.push(name.clone());
                        self.scratch_names.len() - 1
                    }
                };
                let slot = match self.scratch[rank].iter().position(|(s, _)| *s == k) {
                    Some(p) => p,
                    None => {
                        self.scratch[rank].push((k, 0));
                        self.scratch[rank].len() - 1
                    }
                };
                if index + size > MAX_BUFFER_CHUNKS {
                    return Err(DslError::new(
                        loc,
                        format!(
                            "scratch buffer '{name}'[{index}..{}] of rank {rank} is beyond the {MAX_BUFFER_CHUNKS} chunks a buffer may hold",
                            index + size
                        ),
                    ));
                }
                let len = &mut self.scratch[rank][slot].1;
                if index + size > *len {
                    if !grow {
                        return Err(DslError::new(
                            loc,
                            format!(
                                "scratch buffer '{name}' of rank {rank} has {} chunks; slots {index}..{} were never written",
                                *len,
                                index + size
                            ),
                        ));
                    }
                    *len = index + size;
                }
                return Ok(PRef {
                    rank,
                    buf: PBuf::Scratch(k),
                    index,
                    size,
                });
            }
        };
        let extent = self.collective.size(logical);
        if index + size > extent {
            return Err(DslError::new(
                loc,
                format!(
                    "{}[{index}..{}] of rank {rank} is out of bounds ({} has {extent} chunks in {})",
                    buffer.name(),
                    index + size,
                    buffer.name(),
                    self.collective.kind.class_name()
                ),
            ));
        }
        let (first, at) = self.collective.resolve(rank, logical, index);
        Ok(PRef {
            rank,
            buf: pbuf(first),
            index: at,
            size,
        })
    }

    fn read(&self, r: &PRef, what: &str, loc: &Loc) -> DslResult<Vec<Value>> {
        r.slots()
            .map(|key| {
                self.state.get(&key).cloned().ok_or_else(|| {
                    DslError::new(
                        loc,
                        format!(
                            "{what} reads chunk {}[{}] of rank {} before it is written",
                            self.buf_name(r.buf),
                            key.2,
                            r.rank
                        ),
                    )
                })
            })
            .collect()
    }

    /// The name of buffer `b` in messages (`input`, `output`, a scratch buffer's name).
    pub fn buf_name(&self, b: PBuf) -> &str {
        match b {
            PBuf::Input => "input",
            PBuf::Output => "output",
            PBuf::Scratch(k) => &self.scratch_names[k],
        }
    }

    fn check_pair(&self, src: &PRef, dst: &PRef, what: &str, loc: &Loc) -> DslResult<()> {
        if src.rank != dst.rank && !self.topology.links.contains(&(src.rank, dst.rank)) {
            return Err(DslError::new(
                loc,
                format!(
                    "{what} from rank {} to rank {}: the topology {} has no link {} -> {}",
                    src.rank, dst.rank, self.topology.name, src.rank, dst.rank
                ),
            ));
        }
        let overlap = src.rank == dst.rank
            && src.buf == dst.buf
            && src.index < dst.index + dst.size
            && dst.index < src.index + src.size;
        if overlap {
            return Err(DslError::new(
                loc,
                format!(
                    "{what} on rank {}: source and destination overlap in {}",
                    src.rank,
                    self.buf_name(src.buf)
                ),
            ));
        }
        Ok(())
    }

    /// `src.copy(dst_rank, buffer, index)`: returns the destination.
    #[allow(clippy::too_many_arguments)]
    pub fn copy(
        &mut self,
        src: (usize, &Buffer, usize, usize),
        dst_rank: usize,
        dst_buffer: &Buffer,
        dst_index: usize,
        pins: Pins,
        loc: Loc,
    ) -> DslResult<()> {
        let s = self.resolve(src.0, src.1, src.2, src.3, false, &loc)?;
        let values = self.read(&s, "copy", &loc)?;
        let (dst_buffer, dst_index) = self.collective.copy_target(src.0, dst_buffer, dst_index);
        let d = self.resolve(dst_rank, &dst_buffer, dst_index, src.3, true, &loc)?;
        if s == d {
            // A copy onto itself does nothing (as in msccl-tools).
            return Ok(());
        }
        self.check_pair(&s, &d, "copy", &loc)?;
        for ((r, b, i), v) in d.slots().zip(values) {
            self.state.insert((r, b, i), v);
        }
        self.ops.push(Operation {
            reduce: false,
            compute: false,
            src: s,
            dst: d,
            pins,
            loc,
        });
        Ok(())
    }

    /// `dst.reduce(src)`: `dst ← dst ⊕ src` on dst's rank.
    pub fn reduce(
        &mut self,
        dst: (usize, &Buffer, usize, usize),
        src: (usize, &Buffer, usize, usize),
        pins: Pins,
        loc: Loc,
    ) -> DslResult<()> {
        if dst.3 != src.3 {
            return Err(DslError::new(
                &loc,
                format!(
                    "reduce of chunks of different sizes ({} and {})",
                    dst.3, src.3
                ),
            ));
        }
        let d = self.resolve(dst.0, dst.1, dst.2, dst.3, false, &loc)?;
        let s = self.resolve(src.0, src.1, src.2, src.3, false, &loc)?;
        let mine = self.read(&d, "reduce", &loc)?;
        let other = self.read(&s, "reduce", &loc)?;
        self.check_pair(&s, &d, "reduce", &loc)?;
        for ((r, b, i), (mut a, o)) in d.slots().zip(mine.into_iter().zip(other)) {
            if a.last() == Some(&COMPUTED) || o.last() == Some(&COMPUTED) {
                return Err(DslError::new(
                    &loc,
                    format!(
                        "reduce into {}[{i}] of rank {r} of computed data: the compute must follow the chunk's last reduce",
                        self.buf_name(b)
                    ),
                ));
            }
            if let Some(c) = o.iter().find(|c| a.contains(c)) {
                return Err(DslError::new(
                    &loc,
                    format!(
                        "reduce counts input chunk {} of rank {} twice in {}[{i}] of rank {r}",
                        c.chunk,
                        c.rank,
                        self.buf_name(b)
                    ),
                ));
            }
            a.extend(o);
            a.sort();
            self.state.insert((r, b, i), a);
        }
        self.ops.push(Operation {
            reduce: true,
            compute: false,
            src: s,
            dst: d,
            pins,
            loc,
        });
        Ok(())
    }

    /// `ref.compute(...)` (synth's extension of MSCCLang): applies the program's compute to
    /// the slots of `r` on its rank. Each slot must be an output chunk holding its full
    /// reduction, not yet computed; a program has one compute, so every call names the same.
    pub fn compute(
        &mut self,
        r: (usize, &Buffer, usize, usize),
        compute: Compute,
        pins: Pins,
        loc: Loc,
    ) -> DslResult<()> {
        compute
            .kernel()
            .map_err(|e| DslError::new(&loc, e.to_string()))?;
        match &self.compute {
            Some((first, at)) if *first != compute => {
                return Err(DslError::new(
                    &loc,
                    format!("a program applies one compute; this one differs from the one at {at}"),
                ))
            }
            Some(_) => {}
            None => self.compute = Some((compute, loc.clone())),
        }
        let d = self.resolve(r.0, r.1, r.2, r.3, false, &loc)?;
        let values = self.read(&d, "compute", &loc)?;
        for ((rank, b, i), mut v) in d.slots().zip(values) {
            let Some(k) = self.output_chunk(rank, b, i) else {
                return Err(DslError::new(
                    &loc,
                    format!(
                        "compute on {}[{i}] of rank {rank}: it applies to output chunks only",
                        self.buf_name(b)
                    ),
                ));
            };
            let at = format!("compute on output chunk {k} of rank {rank}");
            if v.last() == Some(&COMPUTED) {
                return Err(DslError::new(&loc, format!("{at}: applied a second time")));
            }
            if let Some(want) = self.collective.expected(rank, k).filter(|w| *w != v) {
                return Err(DslError::new(
                    &loc,
                    format!(
                        "{at}: it holds {} but the full reduction is {} (compute after the chunk's last reduce)",
                        describe(&v),
                        describe(&want)
                    ),
                ));
            }
            v.push(COMPUTED);
            self.state.insert((rank, b, i), v);
        }
        self.ops.push(Operation {
            reduce: false,
            compute: true,
            src: d,
            dst: d,
            pins,
            loc,
        });
        Ok(())
    }

    /// The output chunk of `rank` that physical slot `i` of `b` holds, if any.
    fn output_chunk(&self, rank: usize, b: PBuf, i: usize) -> Option<usize> {
        (0..self.collective.size(ir::Buffer::Output)).find(|&k| {
            let (buf, at) = self.collective.resolve(rank, ir::Buffer::Output, k);
            (pbuf(buf), at) == (b, i)
        })
    }

    /// Size of a rank's named scratch buffer so far (where an append lands).
    pub fn scratch_len(&self, rank: usize, name: &str) -> usize {
        let Some(k) = self.scratch_names.iter().position(|s| s == name) else {
            return 0;
        };
        self.scratch
            .get(rank)
            .and_then(|v| v.iter().find(|(s, _)| *s == k))
            .map_or(0, |(_, len)| *len)
    }

    /// MSCCLang's `Check()`: does every output slot hold what the collective requires?
    pub fn check(&self, loc: &Loc) -> DslResult<()> {
        let c = &self.collective;
        for rank in 0..c.ranks {
            for k in 0..c.size(ir::Buffer::Output) {
                let Some(mut want) = c.expected(rank, k) else {
                    continue;
                };
                if self.compute.is_some() {
                    want.push(COMPUTED);
                }
                let (b, i) = c.resolve(rank, ir::Buffer::Output, k);
                let have = self.state.get(&(rank, pbuf(b), i));
                if have != Some(&want) {
                    let got = match have {
                        None => "nothing".to_string(),
                        Some(v) => describe(v),
                    };
                    return Err(DslError::new(
                        loc,
                        format!(
                            "Check failed: rank {rank} output chunk {k} holds {got} but {} needs {}",
                            c.kind.class_name(),
                            describe(&want)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn describe(v: &[Contribution]) -> String {
    let parts: Vec<String> = v
        .iter()
        .take(4)
        .map(|c| match *c {
            COMPUTED => "computed".to_string(),
            c => format!("r{}c{}", c.rank, c.chunk),
        })
        .collect();
    let more = if v.len() > 4 {
        format!(" +{} more", v.len() - 4)
    } else {
        String::new()
    };
    format!("[{}{more}]", parts.join(" "))
}

/// The physical buffer of an IR buffer (scratch: buffer 0).
pub(crate) fn pbuf(b: ir::Buffer) -> PBuf {
    match b {
        ir::Buffer::Input => PBuf::Input,
        ir::Buffer::Output => PBuf::Output,
        ir::Buffer::Scratch => PBuf::Scratch(0),
    }
}

/// A program under construction (MSCCLang's `MSCCLProgram`), for writing algorithms in Rust.
///
/// ```
/// use synth::dsl::{Buffer, Collective, Connectivity, Kind, Options, Program};
/// let coll = Collective::new(Kind::AllGather, 2, 1, false, 0).unwrap();
/// let p = Program::new("ag2", Connectivity::fully_connected(2), coll, Options::default()).unwrap();
/// for r in 0..2 {
///     let c = p.chunk(r, Buffer::Input, 0);
///     c.copy(r, Buffer::Output, r).unwrap();
///     c.copy(1 - r, Buffer::Output, r).unwrap();
/// }
/// p.check().unwrap();
/// let ir = p.compile().unwrap();
/// assert_eq!(ir.ngpus, 2);
/// ```
#[derive(Debug, Clone)]
pub struct Program {
    inner: Rc<RefCell<Tracer>>,
}

impl Program {
    /// Starts a program named `name` (the XML's `name`).
    #[track_caller]
    pub fn new(
        name: &str,
        topology: Connectivity,
        collective: Collective,
        options: Options,
    ) -> DslResult<Program> {
        let loc = Loc::caller();
        Program::at(name, topology, collective, options, loc)
    }

    /// Starts a program whose `MSCCLProgram` statement is at `loc`.
    pub fn at(
        name: &str,
        topology: Connectivity,
        collective: Collective,
        options: Options,
        loc: Loc,
    ) -> DslResult<Program> {
        let tracer = Tracer::new(name, topology, collective, options, loc)?;
        Ok(Program {
            inner: Rc::new(RefCell::new(tracer)),
        })
    }

    /// A reference to one chunk slot: `chunk(rank, buffer, index)`.
    pub fn chunk(&self, rank: usize, buffer: Buffer, index: usize) -> Chunk {
        self.chunks(rank, buffer, index, 1)
    }

    /// A reference to `size` consecutive slots: `chunk(rank, buffer, index, size)`.
    pub fn chunks(&self, rank: usize, buffer: Buffer, index: usize, size: usize) -> Chunk {
        Chunk {
            prog: self.inner.clone(),
            rank,
            buffer,
            index,
            size,
        }
    }

    /// Chunks a rank's named scratch buffer holds so far (the index an append would use).
    pub fn scratch_len(&self, rank: usize, name: &str) -> usize {
        self.inner.borrow().scratch_len(rank, name)
    }

    /// MSCCLang's `Check()`: the postcondition on the traced buffers.
    #[track_caller]
    pub fn check(&self) -> DslResult<()> {
        self.inner.borrow().check(&Loc::caller())
    }

    /// Compiles the recorded operations to a verified IR program.
    pub fn compile(&self) -> DslResult<ir::Program> {
        super::compile::compile(&self.inner.borrow())
    }

    /// `Check()` at the end of the program, reported at the `MSCCLProgram` line.
    pub fn check_end(&self) -> DslResult<()> {
        let t = self.inner.borrow();
        t.check(&t.loc)
    }

    /// Instances the program compiles to.
    pub fn instances(&self) -> usize {
        self.inner.borrow().options.instances
    }

    /// Runs `f` on the program's tracer.
    pub(crate) fn with_tracer<T>(&self, f: impl FnOnce(&mut Tracer) -> T) -> T {
        f(&mut self.inner.borrow_mut())
    }
}

/// A reference to consecutive chunk slots of one rank's buffer (MSCCLang's chunk reference).
#[derive(Debug, Clone)]
pub struct Chunk {
    prog: Rc<RefCell<Tracer>>,
    /// Rank.
    pub rank: usize,
    /// Buffer.
    pub buffer: Buffer,
    /// First slot.
    pub index: usize,
    /// Number of slots.
    pub size: usize,
}

impl Chunk {
    fn key(&self) -> (usize, &Buffer, usize, usize) {
        (self.rank, &self.buffer, self.index, self.size)
    }

    /// `copy(dst, buffer, index)`: copies these chunks to `dst`'s buffer at `index`; returns
    /// the destination.
    #[track_caller]
    pub fn copy(&self, dst: usize, buffer: Buffer, index: usize) -> DslResult<Chunk> {
        self.copy_pinned(dst, buffer, index, Pins::default())
    }

    /// `copy` with `sendtb`, `recvtb` and `ch` pins.
    #[track_caller]
    pub fn copy_pinned(
        &self,
        dst: usize,
        buffer: Buffer,
        index: usize,
        pins: Pins,
    ) -> DslResult<Chunk> {
        let loc = Loc::caller();
        self.prog
            .borrow_mut()
            .copy(self.key(), dst, &buffer, index, pins, loc)?;
        Ok(Chunk {
            prog: self.prog.clone(),
            rank: dst,
            buffer,
            index,
            size: self.size,
        })
    }

    /// `reduce(other)`: `self ← self ⊕ other`, on this chunk's rank; returns `self`.
    #[track_caller]
    pub fn reduce(&self, other: &Chunk) -> DslResult<Chunk> {
        self.reduce_pinned(other, Pins::default())
    }

    /// `reduce` with `sendtb`, `recvtb` and `ch` pins.
    #[track_caller]
    pub fn reduce_pinned(&self, other: &Chunk, pins: Pins) -> DslResult<Chunk> {
        let loc = Loc::caller();
        self.prog
            .borrow_mut()
            .reduce(self.key(), other.key(), pins, loc)?;
        Ok(self.clone())
    }

    /// `compute(expr, scalars, seed)` (synth's extension): applies the program's elementwise
    /// compute to these chunks, fully reduced output chunks, on their rank. `expr` is a
    /// preset (`adam`, `sgd`, `bias-dropout-residual`) or statements in the language of
    /// [`runtime::compute`]; `scalars` override the preset's defaults. Returns `self`.
    #[track_caller]
    pub fn compute(&self, expr: &str, scalars: &[(&str, f64)], seed: u64) -> DslResult<Chunk> {
        let loc = Loc::caller();
        let compute = compute_of(expr, scalars.iter().map(|(k, v)| (k.to_string(), *v)), seed)
            .map_err(|m| DslError::new(&loc, m))?;
        self.prog
            .borrow_mut()
            .compute(self.key(), compute, Pins::default(), loc)?;
        Ok(self.clone())
    }

    /// `split(n)`: `n` equal references (the size must be a multiple of `n`).
    #[track_caller]
    pub fn split(&self, n: usize) -> DslResult<Vec<Chunk>> {
        if n == 0 || !self.size.is_multiple_of(n) {
            return Err(DslError::new(
                &Loc::caller(),
                format!("cannot split {} chunks into {n} equal parts", self.size),
            ));
        }
        let part = self.size / n;
        Ok((0..n)
            .map(|k| Chunk {
                index: self.index + k * part,
                size: part,
                ..self.clone()
            })
            .collect())
    }

    /// `group(other)`: joins two adjacent references of one buffer.
    #[track_caller]
    pub fn group(&self, other: &Chunk) -> DslResult<Chunk> {
        let adjacent = self.rank == other.rank
            && self.buffer == other.buffer
            && self.index + self.size == other.index;
        if !adjacent {
            return Err(DslError::new(
                &Loc::caller(),
                "group needs two adjacent chunk references of one buffer",
            ));
        }
        Ok(Chunk {
            size: self.size + other.size,
            ..self.clone()
        })
    }
}

/// The compute `.compute(expr, **scalars)` names: a preset with its default scalars or
/// statements, `scalars` overriding (an error message for an unknown preset name).
pub(crate) fn compute_of(
    expr: &str,
    scalars: impl IntoIterator<Item = (String, f64)>,
    seed: u64,
) -> Result<Compute, String> {
    let (program, mut defaults) = runtime::compute::epilogue(expr).ok_or_else(|| {
        format!("compute {expr:?}: not adam, sgd, bias-dropout-residual, nor statements ending in `out = ...`")
    })?;
    defaults.extend(scalars);
    Ok(Compute {
        program,
        scalars: defaults,
        seed,
    })
}
