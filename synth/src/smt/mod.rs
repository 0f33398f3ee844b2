//! Exact synthesis with the SCCL-style k-synchronous SMT encoding (z3).

pub mod encoding;
pub mod race;
pub mod search;
pub mod symmetry;

pub use search::{Found, Limits, Searcher};
