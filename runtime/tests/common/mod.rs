//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod recorder;

use runtime::cpu::{self, DataType, ReduceOp, RunOptions};
use runtime::ir::Program;
use std::path::PathBuf;

/// The shared folder (fixtures, reference), if this checkout has it.
pub fn shared() -> Option<PathBuf> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared"));
    if p.is_dir() {
        Some(p)
    } else {
        eprintln!("notice: {} is absent; skipping this test", p.display());
        None
    }
}

/// Text of an MSCCL XML fixture of `../shared/fixtures/msccl-xml`, for the tests marked
/// `#[cfg_attr(not(has_shared_fixtures), ignore = ...)]` (ignored in a clone without it).
pub fn required_fixture(name: &str) -> String {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/msccl-xml"
    ))
    .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (this test needs ../shared/fixtures beside the checkout)",
            path.display()
        )
    })
}

/// Text of an MSCCL XML fixture, if the shared folder exists (for tests that use the
/// fixtures as extra cases only).
pub fn fixture(name: &str) -> Option<String> {
    let path = shared()?.join("fixtures/msccl-xml").join(name);
    Some(std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// Runs a program on the CPU in one mode with `chunk_elems` elements per chunk; returns the
/// number of wrong elements.
pub fn run_wrong(
    p: &Program,
    inplace: bool,
    chunk_elems: usize,
    dtype: DataType,
    op: ReduceOp,
) -> usize {
    let opts = RunOptions {
        dtype,
        op,
        inplace,
        elements: chunk_elems * p.nchunksperloop,
        slice_bytes: 4096,
        ..RunOptions::default()
    };
    let r = cpu::run(p, &opts).unwrap_or_else(|e| panic!("{}: {e:#}", p.name));
    r.wrong
}

/// Runs every declared mode at a few chunk sizes and asserts exact results.
pub fn assert_runs_correctly(p: &Program) {
    for inplace in p.modes() {
        for chunk in [1usize, 7, 3000] {
            let wrong = run_wrong(p, inplace, chunk, DataType::F32, ReduceOp::Sum);
            assert_eq!(wrong, 0, "{} inplace={inplace} chunk={chunk}", p.name);
        }
    }
}
