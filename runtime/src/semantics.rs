//! Buffer semantics of each collective: how big every rank's input and output buffers are,
//! which memory they occupy (in place or not), what they hold at the start and what they
//! must hold at the end, as multisets of (rank, input chunk) contributions.
//!
//! With N = nchunksperloop, n = ngpus and f = N / n:
//!
//! | collective | input chunks | output chunks | required output |
//! | --- | --- | --- | --- |
//! | allreduce | N | N | o_r[k] = Σ_j i_j[k] |
//! | allgather | f | N | o_r[j·f+k] = i_j[k] |
//! | reducescatter | N | f | o_r[k] = Σ_j i_j[r·f+k] |
//! | alltoall | N | N | o_r[j·f+k] = i_j[r·f+k] |
//! | broadcast | N | N | o_r[k] = i_root[k] |
//! | reduce | N | N | o_root[k] = Σ_j i_j[k] (other ranks unconstrained) |
//! | gather | f | N | o_root[j·f+k] = i_j[k] (other ranks unconstrained) |
//! | scatter | N | f | o_r[k] = i_root[r·f+k] |
//!
//! In place, allreduce/alltoall/broadcast/reduce use one buffer for both; allgather and
//! gather put rank r's input at output chunk r·f; reducescatter and scatter put the output at
//! input chunk r·f (msccl-ir.md §1.7, §2.1).

use crate::ir::{Buffer, Collective, CustomCollective, Program};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A physical memory region of one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Region {
    /// The user's send buffer (absent in place unless it is the larger one).
    Send,
    /// The user's receive buffer.
    Recv,
    /// The runtime's scratch buffer.
    Scratch,
}

impl Region {
    /// All regions, in index order.
    pub const ALL: [Region; 3] = [Region::Send, Region::Recv, Region::Scratch];

    /// Index 0..3 of the region.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One input chunk of one rank: the unit that collectives move and reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Contribution {
    /// The rank whose input it is.
    pub rank: usize,
    /// The chunk index in that rank's input buffer.
    pub chunk: usize,
}

impl fmt::Display for Contribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(rank {}, chunk {})", self.rank, self.chunk)
    }
}

/// How a collective's buffers alias when it runs in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aliasing {
    /// Input and output are the same memory.
    Same,
    /// The input is the rank's slice of the output.
    InputInOutput,
    /// The output is the rank's slice of the input.
    OutputInInput,
}

/// A custom collective's conditions, indexed by (rank, chunk).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CustomIndex {
    input: usize,
    output: usize,
    pre: HashMap<(usize, usize), Contribution>,
    post: HashMap<(usize, usize), Vec<Contribution>>,
}

/// The semantics of one collective instance (kind, ranks, chunks, root, in-placeness).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Semantics {
    /// The collective.
    pub collective: Collective,
    /// Number of ranks.
    pub ngpus: usize,
    /// nchunksperloop (N).
    pub nchunks: usize,
    /// Root rank (rooted collectives).
    pub root: usize,
    /// Whether send and receive buffers alias.
    pub inplace: bool,
    /// The conditions of a custom collective.
    #[serde(skip)]
    pub custom: Option<Arc<CustomIndex>>,
}

impl Semantics {
    /// Checks the geometry (N divisible by n where slices are needed, root < n).
    pub fn new(
        collective: Collective,
        ngpus: usize,
        nchunks: usize,
        root: usize,
        inplace: bool,
    ) -> Result<Semantics, String> {
        if ngpus == 0 {
            return Err("ngpus must be at least 1".into());
        }
        if nchunks == 0 {
            return Err("nchunksperloop must be at least 1".into());
        }
        if root >= ngpus {
            return Err(format!("root {root} is not a rank (ngpus {ngpus})"));
        }
        if collective == Collective::Custom {
            return Err(
                "a custom collective needs its pre- and postcondition (Semantics::custom)".into(),
            );
        }
        let sem = Semantics {
            collective,
            ngpus,
            nchunks,
            root,
            inplace,
            custom: None,
        };
        if sem.uses_slices() && !nchunks.is_multiple_of(ngpus) {
            return Err(format!(
                "{collective} needs nchunksperloop ({nchunks}) to be a multiple of ngpus ({ngpus})"
            ));
        }
        Ok(sem)
    }

    /// The semantics of a custom collective on `ngpus` ranks with `nchunks` =
    /// nchunksperloop: checks that the buffer sizes match `nchunks` (in place: both equal),
    /// and that every rank and chunk named is in range and named once.
    pub fn custom(
        custom: &CustomCollective,
        ngpus: usize,
        nchunks: usize,
        inplace: bool,
    ) -> Result<Semantics, String> {
        let (input, output) = (custom.input_chunks, custom.output_chunks);
        if ngpus == 0 {
            return Err("ngpus must be at least 1".into());
        }
        if input.max(output) != nchunks {
            return Err(format!(
                "custom collective: nchunksperloop ({nchunks}) must be the larger of its input ({input}) and output ({output}) chunk counts"
            ));
        }
        if inplace && input != output {
            return Err(format!(
                "custom collective: in place needs equal input and output chunk counts (input {input}, output {output})"
            ));
        }
        let check = |what: &str, rank: usize, chunk: usize, extent: usize| {
            if rank >= ngpus || chunk >= extent {
                Err(format!(
                    "custom collective: {what} (rank {rank}, chunk {chunk}) is outside {ngpus} ranks x {extent} chunks"
                ))
            } else {
                Ok(())
            }
        };
        let mut index = CustomIndex {
            input,
            output,
            ..CustomIndex::default()
        };
        for h in &custom.pre {
            check("precondition of", h.rank, h.chunk, input)?;
            check("value", h.value.rank, h.value.chunk, input)?;
            if index.pre.insert((h.rank, h.chunk), h.value).is_some() {
                return Err(format!(
                    "custom collective: input chunk {} of rank {} is listed twice",
                    h.chunk, h.rank
                ));
            }
        }
        for r in &custom.post {
            check("postcondition of", r.rank, r.chunk, output)?;
            if r.sum.is_empty() {
                return Err(format!(
                    "custom collective: output chunk {} of rank {} must hold at least one contribution",
                    r.chunk, r.rank
                ));
            }
            for c in &r.sum {
                check("contribution", c.rank, c.chunk, input)?;
            }
            let mut sum = r.sum.clone();
            sum.sort();
            if index.post.insert((r.rank, r.chunk), sum).is_some() {
                return Err(format!(
                    "custom collective: output chunk {} of rank {} is listed twice",
                    r.chunk, r.rank
                ));
            }
        }
        Ok(Semantics {
            collective: Collective::Custom,
            ngpus,
            nchunks,
            root: 0,
            inplace,
            custom: Some(Arc::new(index)),
        })
    }

    /// The semantics of a program in one mode.
    pub fn of(p: &Program, inplace: bool) -> Result<Semantics, String> {
        match (p.collective, &p.custom) {
            (Collective::Custom, Some(c)) => {
                Semantics::custom(c, p.ngpus, p.nchunksperloop, inplace)
            }
            // Conditions unknown (a file another tool wrote): every buffer the file uses has
            // nchunksperloop chunks (the legacy runtime's rule), inputs hold their own
            // values, and no output is required to hold anything.
            (Collective::Custom, None) => Semantics::custom(
                &CustomCollective {
                    input_chunks: p.nchunksperloop,
                    output_chunks: p.nchunksperloop,
                    pre: Vec::new(),
                    post: Vec::new(),
                },
                p.ngpus,
                p.nchunksperloop,
                inplace,
            ),
            (c, _) => Semantics::new(c, p.ngpus, p.nchunksperloop, p.root, inplace),
        }
    }

    fn uses_slices(&self) -> bool {
        !matches!(
            self.collective,
            Collective::AllReduce | Collective::Broadcast | Collective::Reduce | Collective::Custom
        )
    }

    /// Chunks per rank slice, f = N / n.
    pub fn per_rank(&self) -> usize {
        self.nchunks / self.ngpus
    }

    /// Number of chunks of the logical input or output buffer (same on every rank); scratch
    /// has no fixed extent and gives `None`.
    pub fn extent(&self, buffer: Buffer) -> Option<usize> {
        let n = self.nchunks;
        let f = self.per_rank();
        use Collective::*;
        match (buffer, self.collective) {
            (Buffer::Scratch, _) => None,
            (Buffer::Input, Custom) => self.custom.as_ref().map(|c| c.input),
            (Buffer::Output, Custom) => self.custom.as_ref().map(|c| c.output),
            (Buffer::Input, AllGather | Gather) => Some(f),
            (Buffer::Output, ReduceScatter | Scatter) => Some(f),
            _ => Some(n),
        }
    }

    fn aliasing(&self) -> Aliasing {
        use Collective::*;
        match self.collective {
            AllGather | Gather => Aliasing::InputInOutput,
            ReduceScatter | Scatter => Aliasing::OutputInInput,
            _ => Aliasing::Same,
        }
    }

    /// Chunks of a physical region (scratch is sized by the program, so `None`).
    pub fn region_chunks(&self, region: Region) -> Option<usize> {
        let input = self.extent(Buffer::Input)?;
        let output = self.extent(Buffer::Output)?;
        match (region, self.inplace, self.aliasing()) {
            (Region::Scratch, _, _) => None,
            (Region::Send, false, _) => Some(input),
            (Region::Recv, false, _) => Some(output),
            (Region::Send, true, Aliasing::OutputInInput) => Some(input),
            (Region::Send, true, _) => Some(0),
            (Region::Recv, true, Aliasing::OutputInInput) => Some(0),
            (Region::Recv, true, _) => Some(output),
        }
    }

    /// Where chunk `chunk` of a logical buffer of `rank` lives, or `None` if it is outside
    /// the buffer's extent. Scratch maps to itself without a bound.
    pub fn resolve(&self, rank: usize, buffer: Buffer, chunk: usize) -> Option<(Region, usize)> {
        if buffer == Buffer::Scratch {
            return Some((Region::Scratch, chunk));
        }
        if chunk >= self.extent(buffer)? {
            return None;
        }
        let slice = rank * self.per_rank() + chunk;
        Some(match (buffer, self.inplace, self.aliasing()) {
            (Buffer::Input, false, _) => (Region::Send, chunk),
            (Buffer::Output, false, _) => (Region::Recv, chunk),
            (Buffer::Input, true, Aliasing::Same) => (Region::Recv, chunk),
            (Buffer::Output, true, Aliasing::Same) => (Region::Recv, chunk),
            (Buffer::Input, true, Aliasing::InputInOutput) => (Region::Recv, slice),
            (Buffer::Output, true, Aliasing::InputInOutput) => (Region::Recv, chunk),
            (Buffer::Input, true, Aliasing::OutputInInput) => (Region::Send, chunk),
            (Buffer::Output, true, Aliasing::OutputInInput) => (Region::Send, slice),
            (Buffer::Scratch, _, _) => unreachable!("handled above"),
        })
    }

    /// What input chunk `chunk` of `rank` holds at the start: that rank's own contribution
    /// (a custom collective's precondition may say it is another rank's).
    pub fn initial_input(&self, rank: usize, chunk: usize) -> Contribution {
        self.custom
            .as_ref()
            .and_then(|c| c.pre.get(&(rank, chunk)).copied())
            .unwrap_or(Contribution { rank, chunk })
    }

    /// What output chunk `chunk` of `rank` must hold at the end (sorted), or `None` when the
    /// collective leaves it unconstrained.
    pub fn expected_output(&self, rank: usize, chunk: usize) -> Option<Vec<Contribution>> {
        let f = self.per_rank();
        let all = |c: usize| -> Vec<Contribution> {
            (0..self.ngpus)
                .map(|j| Contribution { rank: j, chunk: c })
                .collect()
        };
        let one = |r: usize, c: usize| vec![Contribution { rank: r, chunk: c }];
        if chunk >= self.extent(Buffer::Output)? {
            return None;
        }
        use Collective::*;
        Some(match self.collective {
            AllReduce => all(chunk),
            AllGather => one(chunk / f, chunk % f),
            ReduceScatter => all(rank * f + chunk),
            AllToAll => one(chunk / f, rank * f + chunk % f),
            Broadcast => one(self.root, chunk),
            Reduce if rank == self.root => all(chunk),
            Gather if rank == self.root => one(chunk / f, chunk % f),
            Reduce | Gather => return None,
            Scatter => one(self.root, rank * f + chunk),
            Custom => self.custom.as_ref()?.post.get(&(rank, chunk))?.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inplace_allgather_input_is_rank_slice_of_output() {
        let s = Semantics::new(Collective::AllGather, 4, 8, 0, true).unwrap();
        assert_eq!(s.resolve(2, Buffer::Input, 1), Some((Region::Recv, 5)));
        assert_eq!(s.resolve(2, Buffer::Input, 2), None);
        assert_eq!(s.region_chunks(Region::Send), Some(0));
    }

    #[test]
    fn inplace_reducescatter_output_is_rank_slice_of_input() {
        let s = Semantics::new(Collective::ReduceScatter, 4, 4, 0, true).unwrap();
        assert_eq!(s.resolve(3, Buffer::Output, 0), Some((Region::Send, 3)));
        assert_eq!(s.region_chunks(Region::Recv), Some(0));
    }

    #[test]
    fn geometry_errors() {
        assert!(Semantics::new(Collective::AllGather, 3, 4, 0, false).is_err());
        assert!(Semantics::new(Collective::Broadcast, 3, 4, 3, false).is_err());
        assert!(Semantics::new(Collective::AllReduce, 3, 4, 0, false).is_ok());
    }
}
