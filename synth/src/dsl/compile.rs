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
    // FIFOs); then one threadblock per peer and direction.
    let compact = build(t, &dag, true)?;
    match runtime::verify::verify(&compact) {
        Ok(()) => Ok(compact),
        Err(runtime::verify::VerifyError::Deadlock { .. }) => {
            let split = build(t, &dag, false)?;
            runtime::verify::verify(&split).map_err(|e| unverified(t, e))?;
            Ok(split)
        }
        Err(e) => Err(unverified(t, e)),
    }
}

/// The error of a compiled program that fails verification.
fn unverified(t: &Tracer, e: runtime::verify::VerifyError) -> DslError {
    DslError::new(
        &t.loc,
        format!("the compiled program fails verification: {e}"),
    )
    .with_detail(e.detail().to_vec())
}

/// Schedules and replicates (one threadblock per peer where `pair`).
fn build(t: &Tracer, dag: &Dag, pair: bool) -> DslResult<Program> {
    let gpus = schedule::schedule(t, dag, pair)?;
    let instances = t.options.instances;
    let (gpus, custom) = replicate::replicate(
        gpus,
        &t.collective,
        instances,
        t.options.interleaved_replication,
    );
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
    };
    Ok(program)
}
