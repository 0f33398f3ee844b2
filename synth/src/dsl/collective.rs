//! The collectives a DSL program can implement: buffer sizes, what the input holds at the
//! start, how buffers alias in place, and the postcondition (delegated to
//! `runtime::semantics`, the same rules the verifier checks).

use anyhow::{bail, Result};
use runtime::ir;
use runtime::semantics::{Contribution, Semantics};
use std::sync::Arc;

/// Which collective (MSCCLang's `AllReduce`, `AllGather`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Every output slot i is the sum over ranks of input slot i.
    AllReduce,
    /// Output slot r*f+i holds rank r's input slot i.
    AllGather,
    /// Rank r's output slot i is the sum over ranks of input slot r*f+i.
    ReduceScatter,
    /// Output slot s*f+i of rank d holds input slot d*f+i of rank s.
    AllToAll,
    /// Every rank's output holds the root's input.
    Broadcast,
    /// A `Collective` subclass of the program's own: its `init_buffers()` gives the initial
    /// contents and its `check()` the postcondition ([`Collective::conditions`]).
    Custom,
}

impl Kind {
    /// The kind named as in MSCCLang or synth (`AllReduce`, `allreduce`, `reduce_scatter`, ...).
    pub fn parse(name: &str) -> Result<Kind> {
        let key: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        Ok(match key.as_str() {
            "allreduce" => Kind::AllReduce,
            "allgather" => Kind::AllGather,
            "reducescatter" => Kind::ReduceScatter,
            "alltoall" => Kind::AllToAll,
            "broadcast" => Kind::Broadcast,
            _ => bail!("unknown collective `{name}` (AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast)"),
        })
    }

    /// MSCCLang's class name.
    pub fn class_name(self) -> &'static str {
        match self {
            Kind::AllReduce => "AllReduce",
            Kind::AllGather => "AllGather",
            Kind::ReduceScatter => "ReduceScatter",
            Kind::AllToAll => "AllToAll",
            Kind::Broadcast => "Broadcast",
            Kind::Custom => "custom collective",
        }
    }
}

/// A DSL buffer as a program names it, before in-place aliasing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// `Buffer.input`.
    Input,
    /// `Buffer.output`.
    Output,
    /// A named scratch buffer (`'scratch'`, `f'copy_{n}'`, `Buffer.scratch`).
    Scratch(String),
}

impl Buffer {
    /// A named scratch buffer.
    pub fn scratch(name: &str) -> Buffer {
        Buffer::Scratch(name.to_string())
    }

    /// The buffer named in a trace: `input`, `output`, anything else is scratch.
    pub fn from_name(name: &str) -> Buffer {
        match name {
            "input" | "i" => Buffer::Input,
            "output" | "o" => Buffer::Output,
            other => Buffer::Scratch(other.to_string()),
        }
    }

    /// How the program names it.
    pub fn name(&self) -> &str {
        match self {
            Buffer::Input => "input",
            Buffer::Output => "output",
            Buffer::Scratch(s) => s,
        }
    }
}

/// Most chunks of one buffer of one instance: the XML's offsets and `nchunksperloop` must fit
/// (offsets are int16).
pub const MAX_BUFFER_CHUNKS: usize = runtime::limits::MAX_OFFSET + 1;

/// An error when `ranks` exceeds the fabric limit or a buffer of `chunks` (`None`: beyond
/// `usize`) exceeds [`MAX_BUFFER_CHUNKS`]; `what` says how the buffer size came about.
fn check_geometry(ranks: usize, chunks: Option<usize>, what: &str) -> Result<()> {
    let most = crate::topology::MAX_RANKS;
    if ranks > most {
        bail!("{ranks} ranks exceed the limit of {most}");
    }
    match chunks {
        Some(c) if c <= MAX_BUFFER_CHUNKS => Ok(()),
        _ => bail!("{what}: a buffer may hold at most {MAX_BUFFER_CHUNKS} chunks"),
    }
}

/// A collective instance: kind, ranks, chunks per rank slice, in-placeness and root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collective {
    /// Which collective.
    pub kind: Kind,
    /// Number of ranks.
    pub ranks: usize,
    /// MSCCLang's `chunk_factor`: chunks per rank slice.
    pub chunk_factor: usize,
    /// Whether send and receive buffers alias.
    pub inplace: bool,
    /// Root rank (broadcast).
    pub root: usize,
    /// A custom collective's buffer sizes and conditions (one instance).
    pub conditions: Option<Arc<ir::CustomCollective>>,
}

impl Collective {
    /// A collective after checking its geometry.
    pub fn new(
        kind: Kind,
        ranks: usize,
        chunk_factor: usize,
        inplace: bool,
        root: usize,
    ) -> Result<Collective> {
        if ranks == 0 {
            bail!("a collective needs at least one rank");
        }
        if chunk_factor == 0 {
            bail!("chunk_factor must be at least 1");
        }
        if root >= ranks {
            bail!("root {root} is not a rank (the collective has {ranks})");
        }
        if kind == Kind::Custom {
            bail!("a custom collective is made with Collective::custom");
        }
        check_geometry(
            ranks,
            ranks.checked_mul(chunk_factor),
            &format!("{ranks} ranks x chunk_factor {chunk_factor}"),
        )?;
        Ok(Collective {
            kind,
            ranks,
            chunk_factor,
            inplace,
            root,
            conditions: None,
        })
    }

    /// A custom collective on `ranks` ranks with its buffer sizes and conditions (checked as
    /// the verifier will: ranks and chunks in range; in place, equal buffer sizes).
    pub fn custom(
        ranks: usize,
        chunk_factor: usize,
        inplace: bool,
        conditions: ir::CustomCollective,
    ) -> Result<Collective> {
        let nchunks = conditions.input_chunks.max(conditions.output_chunks);
        if nchunks == 0 {
            bail!("the custom collective's buffers have no chunks");
        }
        check_geometry(ranks, Some(nchunks), &format!("{nchunks} chunks"))?;
        Semantics::custom(&conditions, ranks, nchunks, inplace).map_err(anyhow::Error::msg)?;
        Ok(Collective {
            kind: Kind::Custom,
            ranks,
            chunk_factor: chunk_factor.max(1),
            inplace,
            root: 0,
            conditions: Some(Arc::new(conditions)),
        })
    }

    /// The conditions of `instances` interleaved or blocked copies, each input and output
    /// chunk k of copy i at `map(k, i)`.
    pub fn replicated_conditions(
        &self,
        instances: usize,
        map: impl Fn(usize, usize) -> usize,
    ) -> Option<ir::CustomCollective> {
        let c = self.conditions.as_ref()?;
        let mut out = ir::CustomCollective {
            input_chunks: c.input_chunks * instances,
            output_chunks: c.output_chunks * instances,
            pre: Vec::new(),
            post: Vec::new(),
        };
        for i in 0..instances {
            let at = |x: Contribution| Contribution {
                rank: x.rank,
                chunk: map(x.chunk, i),
            };
            out.pre.extend(c.pre.iter().map(|h| ir::Holding {
                rank: h.rank,
                chunk: map(h.chunk, i),
                value: at(h.value),
            }));
            out.post.extend(c.post.iter().map(|r| ir::Requirement {
                rank: r.rank,
                chunk: map(r.chunk, i),
                sum: r.sum.iter().map(|&x| at(x)).collect(),
            }));
        }
        Some(out)
    }

    /// The IR collective.
    pub fn ir(&self) -> ir::Collective {
        match self.kind {
            Kind::AllReduce => ir::Collective::AllReduce,
            Kind::AllGather => ir::Collective::AllGather,
            Kind::ReduceScatter => ir::Collective::ReduceScatter,
            Kind::AllToAll => ir::Collective::AllToAll,
            Kind::Broadcast => ir::Collective::Broadcast,
            Kind::Custom => ir::Collective::Custom,
        }
    }

    /// Chunk slots of the logical input or output buffer.
    pub fn size(&self, buffer: ir::Buffer) -> usize {
        let (n, f) = (self.ranks, self.chunk_factor);
        match (self.kind, buffer) {
            (_, ir::Buffer::Scratch) => 0,
            (Kind::Custom, ir::Buffer::Input) => {
                self.conditions.as_ref().map_or(0, |c| c.input_chunks)
            }
            (Kind::Custom, _) => self.conditions.as_ref().map_or(0, |c| c.output_chunks),
            (Kind::AllGather, ir::Buffer::Input) => f,
            (Kind::ReduceScatter, ir::Buffer::Output) => f,
            (Kind::AllReduce | Kind::Broadcast, _) => f,
            _ => n * f,
        }
    }

    /// `nchunksperloop` of one instance: the larger buffer's size.
    pub fn nchunks(&self) -> usize {
        self.size(ir::Buffer::Input)
            .max(self.size(ir::Buffer::Output))
    }

    /// Chunks of one rank slice of a buffer (the whole buffer where no slicing applies):
    /// instances replicate within slices so that each copy keeps the collective's meaning.
    /// A custom collective's slice divides both its input and its output, which may differ.
    pub fn slice(&self) -> usize {
        match self.kind {
            Kind::AllReduce | Kind::Broadcast => self.nchunks(),
            Kind::Custom => {
                let (input, output) = (self.size(ir::Buffer::Input), self.size(ir::Buffer::Output));
                num_integer::gcd(input, output).max(1)
            }
            _ => self.chunk_factor,
        }
    }

    /// Where a logical slot of `rank` lives once in-place aliasing is applied, following
    /// msccl-tools: in place, allreduce/alltoall/broadcast use only the input, allgather only
    /// the output (the input is the rank's slice), reduce-scatter only the input.
    pub fn resolve(&self, rank: usize, buffer: ir::Buffer, index: usize) -> (ir::Buffer, usize) {
        use ir::Buffer::*;
        if !self.inplace {
            return (buffer, index);
        }
        let f = self.chunk_factor;
        match (self.kind, buffer) {
            (_, Scratch) => (Scratch, index),
            (Kind::AllGather, Input) => (Output, rank * f + index),
            (Kind::AllGather, Output) => (Output, index),
            (Kind::ReduceScatter, Output) => (Input, rank * f + index),
            (Kind::ReduceScatter, Input) => (Input, index),
            (_, _) => (Input, index),
        }
    }

    /// The logical slot `copy(dst, buffer, index)` writes, as msccl-tools names it: in
    /// place, an allgather's input slot and a reduce-scatter's output slot are the ones of
    /// the *sender's* rank slice (msccl-tools maps them with the sending chunk's rank), so
    /// `c.copy(dst, Buffer.input, i)` on rank r lands in output slot `r·f + i` of `dst`.
    pub fn copy_target(&self, sender: usize, buffer: &Buffer, index: usize) -> (Buffer, usize) {
        let f = self.chunk_factor;
        match (self.inplace, self.kind, buffer) {
            (true, Kind::AllGather, Buffer::Input) => (Buffer::Output, sender * f + index),
            (true, Kind::ReduceScatter, Buffer::Output) => (Buffer::Input, sender * f + index),
            _ => (buffer.clone(), index),
        }
    }

    /// The IR semantics of one instance (initial contents and postcondition).
    pub fn semantics(&self) -> Semantics {
        if let Some(c) = &self.conditions {
            return Semantics::custom(c, self.ranks, self.nchunks(), self.inplace)
                .expect("the conditions were checked in Collective::custom");
        }
        Semantics::new(
            self.ir(),
            self.ranks,
            self.nchunks(),
            self.root,
            self.inplace,
        )
        .expect("the geometry was checked in Collective::new")
    }

    /// What logical output slot `index` of `rank` must hold at the end (sorted), if anything.
    pub fn expected(&self, rank: usize, index: usize) -> Option<Vec<Contribution>> {
        self.semantics().expected_output(rank, index)
    }
}
