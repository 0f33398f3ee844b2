//! synth: synthesizes collective-communication algorithms for GPU fabrics, proves them
//! correct, lowers them to the MSCCL IR and runs them (see `../shared/DESIGN.md`).

#![warn(missing_docs)]

pub mod algo_file;
pub mod algorithm;
pub mod allreduce_shapes;
pub mod baseline;
pub mod bounds;
pub mod catalog;
pub mod check;
pub mod cli;
pub mod collective;
pub mod constructions;
pub mod cutbound;
pub mod direct;
pub mod draw;
pub mod dsl;
pub mod engine;
pub mod flow;
pub mod frontier;
pub mod fuse;
pub mod greedy;
pub mod handoff;
pub mod layout;
pub mod load;
pub mod lower;
pub mod milp;
pub mod origin;
pub mod pair_set;
pub mod progress;
pub mod remembered;
pub mod request_limits;
pub mod select;
pub mod simulate;
pub mod sketch;
pub mod smt;
pub mod symmetry;
pub mod synthesize;
pub mod topology;
pub mod trees;
pub mod util;
