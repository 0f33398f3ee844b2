//! Passes 6 and 7 after scheduling: instances and the final threadblock numbering.
//!
//! Copy i of a threadblock is a new threadblock on channel `c + i × channels of one copy`.
//! Input and output slots are remapped so that every copy keeps the collective's meaning:
//! with interleaved replication, blocks of g slots (g divides every offset, count and rank
//! slice) are interleaved, block b of copy i becoming block `b × instances + i`; otherwise
//! each rank slice holds the copies one after another. Scratch is always laid out copy after
//! copy. With more than one copy every step is cut into pieces of g slots, so that each piece
//! stays contiguous and both ends of every transfer (and every link of a forwarding chain)
//! are cut alike.

use super::collective::Collective;
use num_integer::gcd;
use runtime::ir::{Buffer, Dep, Gpu, Slot, Step, Threadblock};

/// Maps slot `k` of one copy to its slot in copy `i`.
struct SlotMap {
    instances: usize,
    interleaved: bool,
    /// Interleaving granule.
    granule: usize,
    /// Chunks of one rank slice.
    slice: usize,
    /// Scratch chunks of one copy, per rank.
    scratch: Vec<usize>,
    /// Steps stay whole: copies are laid out slice after slice (not interleaved) and no
    /// step's input or output slots cross a slice, so every step maps to one contiguous
    /// run (cutting it would multiply the messages on each connection, and two ranks that
    /// both send before they receive would fill their connections).
    whole: bool,
}

impl SlotMap {
    fn map(&self, rank: usize, s: Slot, i: usize) -> Slot {
        let offset = match s.buffer {
            Buffer::Scratch => i * self.scratch[rank] + s.offset,
            _ => self.user(s.offset, i),
        };
        Slot::new(s.buffer, offset)
    }

    /// Input or output chunk `k` of one copy in copy `i`.
    fn user(&self, k: usize, i: usize) -> usize {
        if self.interleaved {
            let g = self.granule;
            ((k / g) * self.instances + i) * g + k % g
        } else {
            let f = self.slice;
            (k / f) * f * self.instances + i * f + k % f
        }
    }
}

/// Replicates one instance `instances` times and numbers threadblocks as msccl-tools does
/// (sorted by send peer, receive peer, channel). Also returns a custom collective's
/// conditions for all the copies.
pub(crate) fn replicate(
    gpus: Vec<Gpu>,
    coll: &Collective,
    instances: usize,
    interleaved: bool,
) -> (Vec<Gpu>, Option<runtime::ir::CustomCollective>) {
    let one = |g: &Gpu| g.threadblocks.iter().map(|t| t.channel + 1).max();
    let channels = gpus.iter().filter_map(one).max().unwrap_or(1);
    let mut granule = coll.slice();
    for g in &gpus {
        for s in g.threadblocks.iter().flat_map(|t| &t.steps) {
            granule = gcd(granule, s.count);
            for slot in [s.src, s.dst] {
                if slot.buffer != Buffer::Scratch {
                    granule = gcd(granule, slot.offset);
                }
            }
        }
    }
    let slice = coll.slice();
    let within_slices = gpus
        .iter()
        .flat_map(|g| g.threadblocks.iter().flat_map(|t| &t.steps))
        .all(|s| {
            [s.src, s.dst].iter().all(|slot| {
                slot.buffer == Buffer::Scratch
                    || slot.offset / slice == (slot.offset + s.count.max(1) - 1) / slice
            })
        });
    let map = SlotMap {
        instances,
        interleaved,
        granule: granule.max(1),
        slice,
        scratch: gpus.iter().map(|g| g.scratch_chunks).collect(),
        whole: !interleaved && within_slices,
    };
    let custom = coll.replicated_conditions(instances, |k, i| map.user(k, i));
    let gpus = gpus
        .into_iter()
        .map(|g| {
            let mut tbs: Vec<Threadblock> = Vec::new();
            let per_copy = g.threadblocks.len();
            for i in 0..instances {
                // Each step becomes contiguous pieces; `last[t][s]` is the last piece of step s.
                let mut last: Vec<Vec<usize>> = Vec::new();
                let mut copies = Vec::new();
                for tb in &g.threadblocks {
                    let mut steps = Vec::new();
                    let mut ends = Vec::new();
                    for s in &tb.steps {
                        steps.extend(split(s, g.rank, i, &map));
                        ends.push(steps.len() - 1);
                    }
                    last.push(ends);
                    copies.push(Threadblock {
                        channel: tb.channel + i * channels,
                        steps,
                        ..tb.clone()
                    });
                }
                for tb in &mut copies {
                    for s in &mut tb.steps {
                        for d in &mut s.deps {
                            *d = Dep {
                                tb: d.tb + i * per_copy,
                                step: last[d.tb][d.step],
                            };
                        }
                    }
                }
                tbs.extend(copies);
            }
            let scale = |c: usize| c * instances;
            renumber(Gpu {
                input_chunks: scale(g.input_chunks),
                output_chunks: scale(g.output_chunks),
                scratch_chunks: scale(g.scratch_chunks),
                threadblocks: tbs,
                rank: g.rank,
            })
        })
        .collect();
    (gpus, custom)
}

/// The pieces of a step in copy `i`: `count / g` steps of g slots (one step when there is
/// one copy or steps stay whole); the first piece keeps the step's dependencies.
fn split(s: &Step, rank: usize, i: usize, map: &SlotMap) -> Vec<Step> {
    let unit = if map.instances == 1 || map.whole {
        s.count
    } else {
        map.granule
    };
    let at = |slot: Slot, j: usize| map.map(rank, Slot::new(slot.buffer, slot.offset + j), i);
    (0..s.count / unit)
        .map(|p| Step {
            src: at(s.src, p * unit),
            dst: at(s.dst, p * unit),
            count: unit,
            deps: if p == 0 { s.deps.clone() } else { Vec::new() },
            ..s.clone()
        })
        .collect()
}

/// Sorts threadblocks by (send peer, receive peer, channel) and renumbers dependencies.
fn renumber(mut g: Gpu) -> Gpu {
    let key = |t: &Threadblock| {
        (
            t.send.map_or(-1, |p| p as i64),
            t.recv.map_or(-1, |p| p as i64),
            t.channel,
        )
    };
    let mut order: Vec<usize> = (0..g.threadblocks.len()).collect();
    order.sort_by_key(|&t| key(&g.threadblocks[t]));
    let mut new_id = vec![0; order.len()];
    for (new, &old) in order.iter().enumerate() {
        new_id[old] = new;
    }
    let mut tbs: Vec<Option<Threadblock>> = g.threadblocks.drain(..).map(Some).collect();
    g.threadblocks = order
        .iter()
        .map(|&old| tbs[old].take().expect("each threadblock once"))
        .collect();
    for tb in &mut g.threadblocks {
        for s in &mut tb.steps {
            for d in &mut s.deps {
                d.tb = new_id[d.tb];
            }
        }
    }
    g
}
