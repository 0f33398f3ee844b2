//! Exact synthesis with the SCCL-style k-synchronous SMT encoding (z3).

pub mod encoding;
pub mod search;

pub use search::{Found, Limits, Searcher};
