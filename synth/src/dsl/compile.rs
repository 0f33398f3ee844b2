//! The compiler driver: DAG, fusion, scheduling, instances, then the independent verifier.

use super::builder::Tracer;
use super::dag::Dag;
use super::error::{DslError, DslResult};
use super::{replicate, schedule};
use runtime::ir::{Flavor, Program};

/// Compiles a traced program to an IR program and verifies it with `runtime::verify`.
pub(crate) fn compile(t: &Tracer) -> DslResult<Program> {
    if t.ops.is_empty() {
        return Err(DslError::new(&t.loc, "the program has no chunk operations"));
    }
    let mut dag = Dag::build(t);
    if t.options.instr_fusion && t.options.flavor != Flavor::Rccl {
        dag.fuse(t.options.policy);
    }
    let gpus = schedule::schedule(t, &dag)?;
    let instances = t.options.instances;
    let gpus = replicate::replicate(
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
    };
    runtime::verify::verify(&program).map_err(|e| {
        DslError::new(
            &t.loc,
            format!("the compiled program fails verification: {e}"),
        )
    })?;
    Ok(program)
}
