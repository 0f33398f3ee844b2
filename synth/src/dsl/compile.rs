//! The compiler driver: DAG, fusion, scheduling, instances, then the independent verifier.

use super::builder::Tracer;
use super::dag::Dag;
use super::error::{DslError, DslResult};
use super::{replicate, schedule};
use runtime::ir::{Buffer, Flavor, Op, Program, Slot};
use runtime::semantics::Semantics;

/// Compiles a traced program to an IR program and verifies it with `runtime::verify`; where
/// one threadblock per peer leaves no schedule, one per peer and direction.
pub(crate) fn compile(t: &Tracer) -> DslResult<Program> {
    if t.ops.is_empty() {
        return Err(DslError::new(&t.loc, "the program has no chunk operations"));
    }
    let fused = t.options.flavor != Flavor::Rccl;
    let mut dag = Dag::build(t, fused);
    let fuse = t.options.instr_fusion && fused;
    if fuse {
        dag.fuse(t.options.policy);
    }
    let first = attempt(t, &dag);
    if first.is_err() && fuse {
        // Fused chains need threadblocks (and so channels) of their own; without fusion a
        // program may still fit the runtimes' channels.
        if let Ok(program) = attempt(t, &Dag::build(t, fused)) {
            return Ok(program);
        }
    }
    first
}

/// Compiles the DAG `dag` with the first layout that verifies (see [`compile`]).
///
/// Copies never cut a transfer into pieces: a transfer of several chunks whose copy is not
/// contiguous (it spans rank slices) would become one message per chunk on its connection,
/// which loses bandwidth (measured in `results/dsl-channels.md`). So the copies take the
/// slot layout asked for (interleaved or slice after slice) where it keeps every transfer
/// whole, else the other one; where neither does, the program is compiled as one copy.
fn attempt(t: &Tracer, dag: &Dag) -> DslResult<Program> {
    // The schedule orders every copy so that no connection overfills (it cannot deadlock),
    // but one threadblock per peer can leave no such order (both sides must send several
    // messages before they receive); then one threadblock per peer and direction.
    let asked = t.options.instances;
    let preferred = t.options.interleaved_replication;
    let mut layouts: Vec<(bool, usize)> = [preferred, !preferred]
        .into_iter()
        .filter(|&interleaved| {
            let map = replicate::SlotMap::new(t, dag, interleaved);
            asked > 1 && !map.cuts_transfers(dag)
        })
        .map(|interleaved| (interleaved, asked))
        .collect();
    if layouts.is_empty() {
        layouts.push((preferred, 1));
    }
    let mut first_error = None;
    for (interleaved, copies) in layouts {
        for pair in [true, false] {
            let program = match build(t, dag, pair, interleaved, copies) {
                Ok(p) => p,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            match runtime::verify::verify(&program) {
                Ok(()) => return Ok(program),
                Err(e @ runtime::verify::VerifyError::Deadlock { .. }) => {
                    first_error.get_or_insert(unverified(t, e));
                }
                Err(e) => return Err(first_error.unwrap_or(unverified(t, e))),
            }
        }
    }
    Err(first_error.expect("some layout failed"))
}

/// The error of a compiled program that fails verification.
fn unverified(t: &Tracer, e: runtime::verify::VerifyError) -> DslError {
    DslError::new(
        &t.loc,
        format!("the compiled program fails verification: {e}"),
    )
    .with_detail(e.detail().to_vec())
}

/// Schedules and replicates `copies` copies (one threadblock per peer where `pair`; copies
/// interleaved where `interleaved`).
fn build(
    t: &Tracer,
    dag: &Dag,
    pair: bool,
    interleaved: bool,
    copies: usize,
) -> DslResult<Program> {
    let map = replicate::SlotMap::new(t, dag, interleaved).with_instances(copies);
    // The automatic policy may make fewer copies than asked where they would need more
    // channels than the runtimes have (see `schedule::schedule`).
    let (gpus, map) = schedule::schedule(t, dag, pair, &map)?;
    let gpus = gpus.into_iter().map(replicate::renumber).collect();
    let instances = map.instances;
    let custom = t
        .collective
        .replicated_conditions(instances, |k, i| map.user(k, i));
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
        compute: t.compute.as_ref().map(|(c, _)| c.clone()),
    };
    Ok(computes_on_output(program))
}

/// `program` with its compute steps naming logical output chunks (the verifier and the
/// executors apply a compute to output chunks); the DSL lays an in-place program's output
/// onto its input buffer, so a compute there names the input slot that holds the chunk.
fn computes_on_output(mut program: Program) -> Program {
    let Ok(sem) = Semantics::of(&program, program.inplace) else {
        return program;
    };
    let outputs = sem.extent(Buffer::Output).unwrap_or(0);
    for g in &mut program.gpus {
        let rank = g.rank;
        for step in g.threadblocks.iter_mut().flat_map(|tb| tb.steps.iter_mut()) {
            if step.op != Op::Compute || step.dst.buffer == Buffer::Output {
                continue;
            }
            let held = sem.resolve(rank, step.dst.buffer, step.dst.offset);
            if let Some(k) = (0..outputs).find(|&k| sem.resolve(rank, Buffer::Output, k) == held) {
                step.dst = Slot::new(Buffer::Output, k);
                step.src = step.dst;
                // The rank now addresses its output buffer (its whole extent).
                g.output_chunks = outputs;
            }
        }
    }
    program
}
