//! MSCCL XML: a writer that follows the conservative emitter contract of msccl-ir.md §1.13 in
//! three flavours ([`Flavor`]), and a reader that mirrors the runtimes' lexical rules and
//! checks everything their parser leaves unchecked (§1.12).

mod dialect;
mod lexer;
mod reader;
mod writer;

pub use crate::ir::Flavor;
pub use crate::limits::{Limits, MAX_NAME};
pub use dialect::{Defaulted, Dialect, Refusal};
pub use lexer::{parse_document, parse_streaming, Element};
pub use reader::{
    read_file, read_file_dialect, read_str, read_str_dialect, CUSTOM_COMMENT,
    LEGACY_DEFAULT_MAX_BYTES,
};
pub use writer::{
    legacy_max_bytes, writable, write, write_to, WriteError, WriteProblem,
    LEGACY_MIN_COVERED_BYTES, LEGACY_SCRATCH_BYTES, LEGACY_UNLIMITED_MAX_BYTES,
};

use crate::ir::{Op, Program, Step};
use std::fmt;

/// Most `re` steps the runtime fuses into one transmission.
pub const MAX_REDUCE_FUSION: usize = 16;
/// Most GPUs (`ngpus`) the reader accepts (README "Limits"; synth's fabrics have at most as
/// many ranks), checked before anything per GPU is allocated.
pub const MAX_NGPUS: usize = 4096;

/// A reader error: where (line, element, attribute) and what, in the runtime's words where it
/// has some.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct XmlError {
    /// 1-based line (0 when the file could not be read).
    pub line: usize,
    /// Element name ("" when not known yet).
    pub element: String,
    /// Attribute name, when one is at fault.
    pub attribute: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl XmlError {
    /// A new error.
    pub fn new(
        line: usize,
        element: &str,
        attribute: Option<&str>,
        message: impl Into<String>,
    ) -> XmlError {
        XmlError {
            line,
            element: element.to_string(),
            attribute: attribute.map(str::to_string),
            message: message.into(),
        }
    }
}

impl fmt::Display for XmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}", self.line)?;
        if !self.element.is_empty() {
            write!(f, ", element {}", self.element)?;
        }
        if let Some(a) = &self.attribute {
            write!(f, ", attribute {a}")?;
        }
        // Values quoted in the message may hold line breaks; the error stays one line.
        let message = self.message.replace('\n', "\\n").replace('\r', "\\r");
        write!(f, ": {message}")
    }
}

/// The steps of a rank that some dependency names (those get `hasdep="1"`): per
/// threadblock, per step (dependencies on steps that do not exist are left out).
pub fn dependency_targets(p: &Program, rank: usize) -> Vec<Vec<bool>> {
    let tbs = &p.gpus[rank].threadblocks;
    let mut targets: Vec<Vec<bool>> = tbs.iter().map(|tb| vec![false; tb.steps.len()]).collect();
    for d in tbs
        .iter()
        .flat_map(|tb| tb.steps.iter().flat_map(|s| &s.deps))
    {
        if let Some(t) = targets.get_mut(d.tb).and_then(|t| t.get_mut(d.step)) {
            *t = true;
        }
    }
    targets
}

/// True if the runtime fuses `cur` into the `re` chain ending with `prev` (msccl-ir.md
/// §1.8): both `re`, same destination and source buffer, `cur` has no dependency, `prev` is
/// not a dependency target, and the chain has fewer than 16 sources.
pub fn fuses(prev: &Step, prev_targeted: bool, cur: &Step, chain_len: usize) -> bool {
    prev.op == Op::Reduce
        && cur.op == Op::Reduce
        && prev.dst == cur.dst
        && prev.src.buffer == cur.src.buffer
        && cur.deps.is_empty()
        && !prev_targeted
        && chain_len < MAX_REDUCE_FUSION
}

/// For each step of a threadblock, the length of the fused `re` chain it ends so far (1 for
/// a step that is not fused with its predecessor).
pub fn chain_lengths(steps: &[Step], targeted: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut lens: Vec<usize> = Vec::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        let len = match i.checked_sub(1) {
            Some(j) if fuses(&steps[j], targeted(j), s, lens[j]) => lens[j] + 1,
            _ => 1,
        };
        lens.push(len);
    }
    lens
}

/// Runtime transmissions per rank: steps left after the parser drops `nop`s and fuses `re`
/// chains (the sum of `nSteps` over a rank's threadblocks).
pub fn transmissions(p: &Program) -> Vec<usize> {
    p.gpus
        .iter()
        .map(|g| {
            let targets = dependency_targets(p, g.rank);
            g.threadblocks
                .iter()
                .enumerate()
                .map(|(tbi, tb)| {
                    let lens = chain_lengths(&tb.steps, |j| targets[tbi][j]);
                    tb.steps
                        .iter()
                        .zip(&lens)
                        .filter(|(s, l)| s.op != Op::Nop && **l == 1)
                        .count()
                })
                .sum()
        })
        .collect()
}
