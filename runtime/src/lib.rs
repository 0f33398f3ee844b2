//! The IR of synth (a [`ir::Program`], MSCCL's algorithm model), its MSCCL XML and JSON forms,
//! the collectives' buffer semantics, a symbolic verifier, baseline program builders, and a
//! multi-threaded CPU executor.

#![warn(missing_docs)]

pub mod builders;
pub mod compute;
pub mod cpu;
pub mod cuda;
pub mod ir;
pub mod limits;
pub mod semantics;
pub mod verify;
pub mod xml;
