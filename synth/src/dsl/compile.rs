//! The compiler driver: DAG, fusion, scheduling, instances, then the independent verifier.

use super::builder::Tracer;
use super::dag::Dag;
use super::error::{DslError, DslResult};
use super::{replicate, schedule};
use runtime::ir::{Flavor, Program};

/// Compiles a traced program to an IR program and verifies it with `runtime::verify`; where
/// one threadblock per peer deadlocks, one per peer and direction.
pub(crate) fn compile(t: &Tracer) -> DslResult<Program> {
    if t.ops.is_empty() {
        return Err(DslError::new(&t.loc, "the program has no chunk operations"));
    }
    let fused = t.options.flavor != Flavor::Rccl;
    let mut dag = Dag::build(t, fused);
    if t.options.instr_fusion && fused {
        dag.fuse(t.options.policy);
    }
    // One threadblock per peer is compact, but when both sides queue several messages to
    // each other before receiving it can fill the connections (the verifier's bounded
    // FIFOs); then one threadblock per peer and direction. Interleaved instances cut steps
    // into pieces, which multiplies the messages queued; where that deadlocks, the copies
    // are laid out slice after slice instead (steps stay whole where they can).
    let interleaved = t.options.interleaved_replication;
    let mut layouts = vec![(true, interleaved), (false, interleaved)];
    if interleaved && t.options.instances > 1 {
        layouts.extend([(true, false), (false, false)]);
    }
    let mut first_error = None;
    for (pair, interleaved) in layouts {
        let program = build(t, &dag, pair, interleaved)?;
        match runtime::verify::verify(&program) {
            Ok(()) => return Ok(program),
            Err(e @ runtime::verify::VerifyError::Deadlock { .. }) => {
                first_error.get_or_insert(e);
            }
            Err(e) => return Err(unverified(t, first_error.unwrap_or(e))),
        }
    }
    Err(unverified(t, first_error.expect("a deadlock was met")))
}

/// The error of a compiled program that fails verification.
fn unverified(t: &Tracer, e: runtime::verify::VerifyError) -> DslError {
    DslError::new(
        &t.loc,
        format!("the compiled program fails verification: {e}"),
    )
    .with_detail(e.detail().to_vec())
}

/// Schedules and replicates (one threadblock per peer where `pair`; copies interleaved
/// where `interleaved`).
fn build(t: &Tracer, dag: &Dag, pair: bool, interleaved: bool) -> DslResult<Program> {
    let gpus = schedule::schedule(t, dag, pair)?;
    let instances = t.options.instances;
    let (gpus, custom) = replicate::replicate(gpus, &t.collective, instances, interleaved);
    let inplace = t.collective.inplace;
    let program = Program {
        name: t.name.clone(),
        collective: t.collective.ir(),
        root: t.collective.root,
        protocol: t.options.protocol,
        ngpus: t.collective.ranks,
        nchunksperloop: t.collective.nchunks() * instances,
        inplace,
        outofplace: !inplace,
        min_bytes: 0,
        max_bytes: 0,
        gpus,
        custom,
        compute: None,
    };
    Ok(program)
}
