//! Hand-written algorithms: a chunk-oriented language compatible with MSCCLang (the
//! `msccl.language` Python DSL of msccl-tools), compiled to the IR and verified.
//!
//! A program is the path of every chunk: `chunk(rank, buffer, index).copy(rank2, buffer2,
//! index2)` and `.reduce(other)`. Programs come from two front ends that share one
//! [`Program`] builder: Rust code against the builder API, and unchanged MSCCLang Python
//! scripts run with the small pure-Python package under `python/` ([`frontend`]), which
//! records the operations as a JSON trace ([`trace`]). The compiler passes follow the
//! reference (`mscclang.md` §4): instruction DAG (`dag`), fusion into `rcs`/`rrcs`/`rrs`,
//! priorities, threadblock and channel assignment and dependencies (`schedule`), instances
//! and scratch layout (`replicate`), the cycle and send/receive-order checks, then
//! `runtime::verify`. [`emit`] goes the other way: a synthesized algorithm as a program.

mod builder;
mod collective;
mod compile;
mod dag;
pub mod emit;
mod error;
pub mod frontend;
mod replicate;
mod schedule;
pub mod trace;

pub use builder::{Chunk, Connectivity, Pins, Program};
pub use collective::{Buffer, Collective, Kind, MAX_BUFFER_CHUNKS};
pub use error::{DslError, DslResult, Loc};

use runtime::ir::{Flavor, Protocol};

/// Threadblock assignment (MSCCLang's `ThreadblockPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The compiler assigns threadblocks and channels (`ch` pins are kept).
    Auto,
    /// Every operation carries `sendtb`/`recvtb` (and optionally `ch`).
    Manual,
}

/// Program options (`MSCCLProgram` keyword arguments) plus the target runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Copies of the program, each on its own channels and slots.
    pub instances: usize,
    /// NCCL protocol written in the XML.
    pub protocol: Protocol,
    /// Threadblock policy.
    pub policy: Policy,
    /// Interleave the slots of instances (true) or give each its own block per rank slice.
    pub interleaved_replication: bool,
    /// Fuse receive-then-send into `rcs`/`rrcs`/`rrs`.
    pub instr_fusion: bool,
    /// Hoist the dependencies of a chain of local reduces onto its first step (nops before
    /// the chain in the XML) so the runtime still fuses the chain; multiple dependencies
    /// always become nops in the XML.
    pub dependence_nop: bool,
    /// Run each threadblock's instructions in the order they were written (synth's
    /// `instr_order="program"`) instead of by priority; programs written by `--emit-dsl` use
    /// it to reproduce the synthesized schedule exactly.
    pub program_order: bool,
    /// The runtime the XML is for; RCCL runs no fused instructions, so fusion is off there.
    pub flavor: Flavor,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            instances: 1,
            protocol: Protocol::Simple,
            policy: Policy::Auto,
            interleaved_replication: true,
            instr_fusion: true,
            dependence_nop: false,
            program_order: false,
            flavor: Flavor::Nccl,
        }
    }
}
