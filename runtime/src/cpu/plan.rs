//! The executor's plan: every step with its slots resolved to physical regions, its
//! dependencies as global threadblock indices, and its threadblock's FIFO indices.

use crate::ir::{Connection, Op, Program, Slot};
use crate::semantics::{Region, Semantics};
use anyhow::{bail, Result};
use std::collections::BTreeMap;

/// A physical chunk: region index and chunk index in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// Region index ([`Region::index`]).
    pub region: usize,
    /// Chunk index in the region.
    pub chunk: usize,
}

/// A dependency: wait for global threadblock `tb` to finish step `step` in the same pass.
#[derive(Debug, Clone, Copy)]
pub struct DepPlan {
    /// Global threadblock index.
    pub tb: usize,
    /// Step index.
    pub step: u64,
    /// Steps of that threadblock (one pass).
    pub nsteps: u64,
}

/// One resolved step.
#[derive(Debug, Clone)]
pub struct StepPlan {
    /// The instruction.
    pub op: Op,
    src: Option<Loc>,
    dst: Option<Loc>,
    /// Chunks moved.
    pub count: usize,
    /// The destination's chunk index in its buffer (a compute's element indices follow it).
    pub dst_chunk: usize,
    /// Dependencies.
    pub deps: Vec<DepPlan>,
}

impl StepPlan {
    /// The resolved source (only for ops that read it).
    pub fn src(&self) -> Loc {
        self.src.expect("op reads src")
    }

    /// The resolved destination (only for ops that write it).
    pub fn dst(&self) -> Loc {
        self.dst.expect("op writes dst")
    }
}

/// One threadblock's plan.
#[derive(Debug, Clone)]
pub struct TbPlan {
    /// Rank.
    pub rank: usize,
    /// Steps.
    pub steps: Vec<StepPlan>,
    /// FIFO index it sends on.
    pub send: Option<usize>,
    /// FIFO index it receives from.
    pub recv: Option<usize>,
}

/// The plan of a whole program.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Threadblocks in (rank, tb id) order.
    pub tbs: Vec<TbPlan>,
    /// Number of connections (FIFOs).
    pub connections: usize,
}

impl Plan {
    /// Resolves a program for one mode; fails if a slot falls outside its region.
    pub fn new(p: &Program, sem: &Semantics) -> Result<Plan> {
        let mut base = Vec::new();
        let mut next = 0;
        for g in &p.gpus {
            base.push(next);
            next += g.threadblocks.len();
        }
        let mut conns: BTreeMap<Connection, usize> = BTreeMap::new();
        let mut conn = |c: Connection| {
            let n = conns.len();
            *conns.entry(c).or_insert(n)
        };
        let mut tbs = Vec::new();
        for g in &p.gpus {
            for tb in &g.threadblocks {
                let send = tb.send.map(|peer| {
                    conn(Connection {
                        sender: g.rank,
                        receiver: peer,
                        channel: tb.channel,
                    })
                });
                let recv = tb.recv.map(|peer| {
                    conn(Connection {
                        sender: peer,
                        receiver: g.rank,
                        channel: tb.channel,
                    })
                });
                let mut steps = Vec::new();
                for s in &tb.steps {
                    let loc = |used: bool, slot: Slot| -> Result<Option<Loc>> {
                        if used {
                            resolve(p, sem, g.rank, slot, s.count).map(Some)
                        } else {
                            Ok(None)
                        }
                    };
                    let deps = s
                        .deps
                        .iter()
                        .map(|d| DepPlan {
                            tb: base[g.rank] + d.tb,
                            step: d.step as u64,
                            nsteps: g.threadblocks[d.tb].steps.len() as u64,
                        })
                        .collect();
                    steps.push(StepPlan {
                        op: s.op,
                        src: loc(s.op.reads_src(), s.src)?,
                        dst: loc(s.op.writes_dst(), s.dst)?,
                        count: s.count,
                        dst_chunk: s.dst.offset,
                        deps,
                    });
                }
                tbs.push(TbPlan {
                    rank: g.rank,
                    steps,
                    send,
                    recv,
                });
            }
        }
        Ok(Plan {
            tbs,
            connections: conns.len(),
        })
    }

    /// Indices of threadblocks that have steps (each gets a thread).
    pub fn active(&self) -> impl Iterator<Item = usize> + '_ {
        self.tbs
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.steps.is_empty())
            .map(|(i, _)| i)
    }
}

/// Chunks of a region of a rank in this mode.
pub fn region_chunks(p: &Program, sem: &Semantics, rank: usize, region: Region) -> usize {
    sem.region_chunks(region)
        .unwrap_or(p.gpus[rank].scratch_chunks)
}

fn resolve(p: &Program, sem: &Semantics, rank: usize, slot: Slot, count: usize) -> Result<Loc> {
    let Some((region, chunk)) = sem.resolve(rank, slot.buffer, slot.offset) else {
        bail!("rank {rank}: {slot} is outside its buffer");
    };
    if chunk + count > region_chunks(p, sem, rank, region) {
        bail!("rank {rank}: {slot} with count {count} is outside its buffer");
    }
    Ok(Loc {
        region: region.index(),
        chunk,
    })
}
