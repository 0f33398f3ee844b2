//! Compute fused with communication (CoCoNet, Jangda et al., ASPLOS'22): programs that apply
//! an elementwise [`Compute`] after an allreduce, built from any reduce-scatter + allgather
//! pair of programs (synthesized, NCCL's rings, or read from files).
//!
//! * [`Placement::None`]: the pair as one allreduce (reduce-scatter, then allgather).
//! * [`plain`]: an allreduce, then the compute on the whole buffer on every rank.
//! * [`Placement::Split`]: reduce-scatter, the compute on each rank's own slice (N times
//!   less), then the allgather of the computed slices.
//! * [`Placement::Fused`]: as `Split`, but each chunk is computed right after its last
//!   reduction, in that step's threadblock, and the allgather sends it as soon as it is.
//!
//! Producer overlap is a simulation of these programs with [`crate::simulate::Producer`].
//! [`workload`] reads `synth fuse`'s TOML and compares the schedules.

pub mod workload;

use runtime::compute::Compute;
use runtime::ir::{Buffer, Collective, Dep, Gpu, Op, Program, Slot, Step, Threadblock};
use std::collections::{BTreeSet, HashMap, VecDeque};

/// Where the compute goes in a composed allreduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// No compute: the pair as an allreduce.
    None,
    /// One compute step per rank on its slice, after the whole reduce-scatter.
    Split,
    /// One compute step per chunk, right after the step that last writes it.
    Fused,
}

/// Why a pair cannot be composed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FuseError {
    /// The two programs are not a reduce-scatter and an allgather that fit together.
    #[error("cannot pair {rs} with {ag}: {why}")]
    Pair {
        /// The reduce-scatter's name.
        rs: String,
        /// The allgather's name.
        ag: String,
        /// What does not fit.
        why: String,
    },
    /// A chunk's last reduction is not one step that every other write precedes.
    #[error("rank {rank} output chunk {chunk}: {why}")]
    Placement {
        /// The rank.
        rank: usize,
        /// The chunk of its reduce-scatter output.
        chunk: usize,
        /// What is wrong.
        why: String,
    },
}

/// An allreduce (out of place) made of `rs` then `ag`, with the compute placed as `placement`
/// (`compute` is ignored for [`Placement::None`]). Rank r's reduce-scatter output chunk j
/// is the allreduce's output chunk `r·c + j` (c = chunks per rank), which is also its
/// allgather input chunk j; the allgather's threadblocks get channels after the
/// reduce-scatter's and scratch after its scratch.
pub fn compose(
    rs: &Program,
    ag: &Program,
    compute: &Compute,
    placement: Placement,
) -> Result<Program, FuseError> {
    let pair_error = |why: String| FuseError::Pair {
        rs: rs.name.clone(),
        ag: ag.name.clone(),
        why,
    };
    if rs.collective != Collective::ReduceScatter || ag.collective != Collective::AllGather {
        return Err(pair_error(format!(
            "need a reducescatter and an allgather, not {} and {}",
            rs.collective, ag.collective
        )));
    }
    if rs.ngpus != ag.ngpus || rs.nchunksperloop != ag.nchunksperloop {
        return Err(pair_error(format!(
            "{} ranks × {} chunks against {} × {}",
            rs.ngpus, rs.nchunksperloop, ag.ngpus, ag.nchunksperloop
        )));
    }
    if !rs.outofplace {
        return Err(pair_error(
            "the reduce-scatter is valid in place only; the allreduce reads its input out of place"
                .into(),
        ));
    }
    let (n, big) = (rs.ngpus, rs.nchunksperloop);
    if n == 0 || !big.is_multiple_of(n) || rs.gpus.len() != n || ag.gpus.len() != n {
        return Err(pair_error(format!("{big} chunks over {n} ranks")));
    }
    let c = big / n;
    let channels = rs.nchannels();
    let mut gpus = Vec::with_capacity(n);
    for r in 0..n {
        let (rg, ag_g) = (&rs.gpus[r], &ag.gpus[r]);
        let rs_scratch = rg.scratch_chunks;
        let map_rs = |s: Slot| match s.buffer {
            Buffer::Output => Slot::new(Buffer::Output, r * c + s.offset),
            _ => s,
        };
        let map_ag = |s: Slot| match s.buffer {
            Buffer::Input => Slot::new(Buffer::Output, r * c + s.offset),
            Buffer::Output => s,
            Buffer::Scratch => Slot::new(Buffer::Scratch, rs_scratch + s.offset),
        };
        let mut tbs: Vec<Threadblock> = rg
            .threadblocks
            .iter()
            .map(|tb| Threadblock {
                steps: tb.steps.iter().map(|s| mapped(s, map_rs, 0)).collect(),
                ..tb.clone()
            })
            .collect();
        // What the allgather's steps on an own chunk wait for, by the placement: the
        // chunk's compute, or without one the whole reduce-scatter of the rank.
        let mut computed: Vec<Vec<Dep>> = vec![Vec::new(); c];
        match placement {
            Placement::None => {
                let deps = last_steps(&tbs);
                computed.iter_mut().for_each(|d| d.clone_from(&deps));
            }
            Placement::Split => {
                let deps = last_steps(&tbs);
                tbs.push(Threadblock {
                    send: None,
                    recv: None,
                    channel: 0,
                    steps: vec![Step {
                        deps,
                        ..Step::new(
                            Op::Compute,
                            Slot::new(Buffer::Output, r * c),
                            Slot::new(Buffer::Output, r * c),
                            c,
                        )
                    }],
                });
                let at = Dep {
                    tb: tbs.len() - 1,
                    step: 0,
                };
                computed.iter_mut().for_each(|d| *d = vec![at]);
            }
            Placement::Fused => {
                computed = fuse_after_last_writes(rs, r, &mut tbs, c)?
                    .into_iter()
                    .map(|d| vec![d])
                    .collect();
            }
        }
        let offset = tbs.len();
        for tb in &ag_g.threadblocks {
            let steps = tb
                .steps
                .iter()
                .map(|s| {
                    let mut step = mapped(s, map_ag, offset);
                    if step.op == Op::Copy && step.src == step.dst {
                        // An out-of-place allgather's copy of its input lands on itself.
                        step.op = Op::Nop;
                    }
                    let own = own_chunks(&step, r * c, c);
                    let extra: BTreeSet<(usize, usize)> = own
                        .flat_map(|j| computed[j].iter())
                        .map(|d| (d.tb, d.step))
                        .collect();
                    step.deps
                        .extend(extra.into_iter().map(|(tb, step)| Dep { tb, step }));
                    step
                })
                .collect();
            tbs.push(Threadblock {
                send: tb.send,
                recv: tb.recv,
                channel: tb.channel + channels,
                steps,
            });
        }
        gpus.push(Gpu {
            rank: r,
            input_chunks: big,
            output_chunks: big,
            scratch_chunks: rs_scratch + ag_g.scratch_chunks,
            threadblocks: tbs,
        });
    }
    let tag = match placement {
        Placement::None => "",
        Placement::Split => "-split",
        Placement::Fused => "-fused",
    };
    Ok(Program {
        name: format!("{}+{}{tag}", rs.name, ag.name),
        collective: Collective::AllReduce,
        root: 0,
        protocol: rs.protocol,
        ngpus: n,
        nchunksperloop: big,
        inplace: false,
        outofplace: true,
        min_bytes: 0,
        max_bytes: 0,
        gpus,
        custom: None,
        compute: (placement != Placement::None).then(|| compute.clone()),
    })
}

/// `allreduce` then the compute on its whole output on every rank, after all of the rank's
/// steps (the plain schedule, as one program).
pub fn plain(allreduce: &Program, compute: &Compute) -> Program {
    let mut p = allreduce.clone();
    for g in &mut p.gpus {
        let deps = last_steps(&g.threadblocks);
        let all = Slot::new(Buffer::Output, 0);
        g.threadblocks.push(Threadblock {
            send: None,
            recv: None,
            channel: 0,
            steps: vec![Step {
                deps,
                ..Step::new(Op::Compute, all, all, g.output_chunks)
            }],
        });
    }
    p.name = format!("{}-then-compute", allreduce.name);
    p.compute = Some(compute.clone());
    p
}

/// `s` with its slots mapped and its dependencies' threadblocks shifted by `offset`.
fn mapped(s: &Step, map: impl Fn(Slot) -> Slot, offset: usize) -> Step {
    Step {
        op: s.op,
        src: map(s.src),
        dst: map(s.dst),
        count: s.count,
        deps: s
            .deps
            .iter()
            .map(|d| Dep {
                tb: d.tb + offset,
                step: d.step,
            })
            .collect(),
    }
}

/// The last step of every threadblock that has steps.
fn last_steps(tbs: &[Threadblock]) -> Vec<Dep> {
    tbs.iter()
        .enumerate()
        .filter(|(_, tb)| !tb.steps.is_empty())
        .map(|(tb, t)| Dep {
            tb,
            step: t.steps.len() - 1,
        })
        .collect()
}

/// The own chunks (indices into `first..first + c` of the output) a step reads or writes.
fn own_chunks(s: &Step, first: usize, c: usize) -> impl Iterator<Item = usize> {
    let reads_dst = matches!(s.op, Op::Reduce | Op::Compute);
    let mut touched = BTreeSet::new();
    for (used, slot) in [
        (s.op.reads_src(), s.src),
        (s.op.writes_dst() || reads_dst, s.dst),
    ] {
        if used && slot.buffer == Buffer::Output {
            for k in slot.offset..slot.offset + s.count {
                if (first..first + c).contains(&k) {
                    touched.insert(k - first);
                }
            }
        }
    }
    touched.into_iter()
}

/// Inserts, for each own chunk j of rank `r`, a compute step right after the step of
/// `tbs` (rank r's mapped reduce-scatter threadblocks) that writes it last (every other
/// write happens before it); returns where each chunk's compute went.
fn fuse_after_last_writes(
    rs: &Program,
    r: usize,
    tbs: &mut [Threadblock],
    c: usize,
) -> Result<Vec<Dep>, FuseError> {
    let order = HappensBefore::new(rs);
    // chunk → its last writer (tb, step), in the unmodified numbering.
    let mut last = Vec::with_capacity(c);
    for j in 0..c {
        let writers: Vec<(usize, usize)> = rs.gpus[r]
            .threadblocks
            .iter()
            .enumerate()
            .flat_map(|(t, tb)| tb.steps.iter().enumerate().map(move |(s, st)| (t, s, st)))
            .filter(|(_, _, st)| {
                st.op.writes_dst()
                    && st.dst.buffer == Buffer::Output
                    && (st.dst.offset..st.dst.offset + st.count).contains(&j)
            })
            .map(|(t, s, _)| (t, s))
            .collect();
        let fail = |why: &str| FuseError::Placement {
            rank: r,
            chunk: j,
            why: why.to_string(),
        };
        let w = writers
            .iter()
            .copied()
            .find(|&w| {
                writers
                    .iter()
                    .all(|&o| o == w || order.before((r, o.0, o.1), (r, w.0, w.1)))
            })
            .ok_or_else(|| {
                if writers.is_empty() {
                    fail("the reduce-scatter never writes it")
                } else {
                    fail("its writes are not ordered, so none is the last reduction")
                }
            })?;
        if rs.gpus[r].threadblocks[w.0].steps[w.1].op.sends() {
            return Err(fail(
                "its last reduction also sends it on, so the compute cannot follow it",
            ));
        }
        last.push(w);
    }
    // New positions: after each old step come the computes of the chunks it writes last.
    let mut after: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
    for (j, w) in last.iter().enumerate() {
        after.entry(*w).or_default().push(j);
    }
    let mut index: Vec<Vec<usize>> = Vec::with_capacity(tbs.len());
    let mut placed = vec![Dep { tb: 0, step: 0 }; c];
    for (t, tb) in tbs.iter_mut().enumerate() {
        let old = std::mem::take(&mut tb.steps);
        let mut map = Vec::with_capacity(old.len());
        for (s, step) in old.into_iter().enumerate() {
            map.push(tb.steps.len());
            tb.steps.push(step);
            for &j in after.get(&(t, s)).map_or(&[][..], Vec::as_slice) {
                let slot = Slot::new(Buffer::Output, r * c + j);
                placed[j] = Dep {
                    tb: t,
                    step: tb.steps.len(),
                };
                tb.steps.push(Step::new(Op::Compute, slot, slot, 1));
            }
        }
        index.push(map);
    }
    // Dependencies named old step indices; computes carry none.
    for tb in tbs.iter_mut() {
        for step in tb.steps.iter_mut().filter(|s| s.op != Op::Compute) {
            for d in &mut step.deps {
                d.step = index[d.tb][d.step];
            }
        }
    }
    Ok(placed)
}

/// The happens-before order of a program's steps: program order in a threadblock,
/// dependencies, and each send before its paired receive.
struct HappensBefore {
    /// Flat index of (rank, tb, 0).
    base: Vec<Vec<usize>>,
    /// Direct predecessors of each step.
    preds: Vec<Vec<usize>>,
}

impl HappensBefore {
    fn new(p: &Program) -> HappensBefore {
        let mut base = Vec::new();
        let mut next = 0;
        for g in &p.gpus {
            base.push(
                g.threadblocks
                    .iter()
                    .map(|tb| {
                        let b = next;
                        next += tb.steps.len();
                        b
                    })
                    .collect::<Vec<_>>(),
            );
        }
        let mut preds = vec![Vec::new(); next];
        for (at, step) in p.steps() {
            let i = base[at.rank][at.tb] + at.step;
            if at.step > 0 {
                preds[i].push(i - 1);
            }
            for d in &step.deps {
                if let Some(&b) = base[at.rank].get(d.tb) {
                    preds[i].push(b + d.step);
                }
            }
        }
        for (s, r) in p.transfer_pairs() {
            preds[base[r.rank][r.tb] + r.step].push(base[s.rank][s.tb] + s.step);
        }
        HappensBefore { base, preds }
    }

    /// True if step `a` (rank, tb, step) happens before step `b`.
    fn before(&self, a: (usize, usize, usize), b: (usize, usize, usize)) -> bool {
        let (a, b) = (self.base[a.0][a.1] + a.2, self.base[b.0][b.1] + b.2);
        let mut seen = vec![false; self.preds.len()];
        let mut queue = VecDeque::from([b]);
        while let Some(x) = queue.pop_front() {
            for &y in &self.preds[x] {
                if y == a {
                    return true;
                }
                if !seen[y] {
                    seen[y] = true;
                    queue.push_back(y);
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::builders::{ring_allgather, ring_reduce_scatter};
    use runtime::compute::{adam_scalars, Compute, ADAM};
    use runtime::verify::{verify, VerifyError};

    fn adam() -> Compute {
        Compute {
            program: ADAM.into(),
            scalars: adam_scalars(),
            seed: 0,
        }
    }

    #[test]
    fn every_placement_of_a_ring_pair_verifies() {
        for n in [2, 3, 5] {
            let order: Vec<usize> = (0..n).collect();
            for channels in [1, 2] {
                let rs = ring_reduce_scatter(&order, channels, false);
                let ag = ring_allgather(&order, channels, true);
                for placement in [Placement::None, Placement::Split, Placement::Fused] {
                    let p = compose(&rs, &ag, &adam(), placement).unwrap();
                    verify(&p).unwrap_or_else(|e| panic!("{n} {channels} {placement:?}: {e}"));
                }
                let ar = compose(&rs, &ag, &adam(), Placement::None).unwrap();
                verify(&plain(&ar, &adam())).unwrap();
            }
        }
    }

    #[test]
    fn compute_before_the_last_reduction_or_twice_is_rejected() {
        let order: Vec<usize> = (0..4).collect();
        let rs = ring_reduce_scatter(&order, 1, false);
        let ag = ring_allgather(&order, 1, true);
        let good = compose(&rs, &ag, &adam(), Placement::Fused).unwrap();
        // The compute of rank 0 moved before the step it followed (its last reduction).
        let mut early = good.clone();
        let (tb, at) = compute_position(&early, 0);
        let steps = &mut early.gpus[0].threadblocks[tb].steps;
        steps.swap(at - 1, at);
        let e = verify(&early).unwrap_err();
        assert!(
            matches!(e, VerifyError::Compute { at: a, .. } if a.rank == 0 && a.tb == tb),
            "{e}"
        );
        assert!(e.to_string().contains("not fully reduced"), "{e}");
        // A second compute on the same chunk right after the first.
        let mut twice = good.clone();
        let (tb, at) = compute_position(&twice, 1);
        let again = twice.gpus[1].threadblocks[tb].steps[at].clone();
        twice.gpus[1].threadblocks[tb].steps.insert(at + 1, again);
        // Shift the dependencies that named later steps of that threadblock.
        for t in &mut twice.gpus[1].threadblocks {
            for s in &mut t.steps {
                for d in &mut s.deps {
                    if d.tb == tb && d.step >= at {
                        d.step += 1;
                    }
                }
            }
        }
        let e = verify(&twice).unwrap_err();
        assert!(e.to_string().contains("applied a second time"), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("rank 1 tb {tb} step {}", at + 1)),
            "{e}"
        );
    }

    fn compute_position(p: &Program, rank: usize) -> (usize, usize) {
        p.gpus[rank]
            .threadblocks
            .iter()
            .enumerate()
            .find_map(|(t, tb)| {
                tb.steps
                    .iter()
                    .position(|s| s.op == Op::Compute)
                    .map(|s| (t, s))
            })
            .expect("a compute step")
    }

    #[test]
    fn msccl_xml_refuses_a_compute_and_says_what_a_runtime_needs() {
        let order: Vec<usize> = (0..3).collect();
        let rs = ring_reduce_scatter(&order, 1, false);
        let ag = ring_allgather(&order, 1, true);
        let p = compose(&rs, &ag, &adam(), Placement::Split).unwrap();
        for flavor in runtime::ir::Flavor::ALL {
            let e = runtime::xml::write(&p, flavor).unwrap_err();
            assert_eq!(e.problem, runtime::xml::WriteProblem::Compute { steps: 3 });
            assert!(
                e.to_string().contains("run copies and reductions only"),
                "{e}"
            );
        }
        let none = compose(&rs, &ag, &adam(), Placement::None).unwrap();
        assert!(runtime::xml::write(&none, runtime::ir::Flavor::Nccl).is_ok());
    }

    #[test]
    fn mismatched_pairs_are_typed_errors() {
        let order: Vec<usize> = (0..4).collect();
        let rs = ring_reduce_scatter(&order, 1, false);
        let ag2 = ring_allgather(&order, 2, true);
        let e = compose(&rs, &ag2, &adam(), Placement::Split).unwrap_err();
        assert!(matches!(e, FuseError::Pair { .. }), "{e}");
        let e = compose(&ag2, &rs, &adam(), Placement::Split).unwrap_err();
        assert!(e.to_string().contains("need a reducescatter"), "{e}");
    }
}
