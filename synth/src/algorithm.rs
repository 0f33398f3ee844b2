//! The solver-independent algorithm: the collective, the topology's name, chunks C and a
//! list of k-synchronous steps, each with its rounds and its sends (DESIGN §2).

use crate::collective::{Chunk, Collective};
use crate::origin::{Family, NameParts, Origin};
use crate::topology::Topology;
use anyhow::{Context, Result};
use num_rational::Ratio;
use serde::{Deserialize, Serialize};

/// One transfer of an address from `src` to `dst` within a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Send {
    /// The address (chunk) moved.
    pub chunk: usize,
    /// Sending rank.
    pub src: usize,
    /// Receiving rank.
    pub dst: usize,
}

/// One synchronous step: all its sends read the state before the step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Rounds the step takes (bandwidth budget: a link of capacity b carries b×rounds chunks).
    pub rounds: u32,
    /// `true` if the receiver reduces what it receives into its copy, `false` if it stores it.
    pub reduce: bool,
    /// The transfers of the step.
    pub sends: Vec<Send>,
}

/// A synthesized (or hand-written) algorithm, before lowering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Algorithm {
    /// Short descriptive name, e.g. `allgather-dgx1-s2-r3-c2`, rendered from the origin
    /// ([`crate::origin::render`]) for people and file names; nothing decides by it.
    pub name: String,
    /// Which engine or construction made it (typed provenance).
    #[serde(default)]
    pub origin: Origin,
    /// Name of the topology it was made for.
    pub topology: String,
    /// The collective (chunks with pre/postconditions) it implements.
    pub collective: Collective,
    /// The steps in order.
    pub steps: Vec<Step>,
    /// Channels the lowering spreads each chunk's pieces over (piece k on channel k mod
    /// this), set by engines whose pieces follow disjoint paths (rings) and must not wait
    /// behind each other in one threadblock; `None` leaves it to the lowering options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece_channels: Option<usize>,
    /// The channel group of each step (the lowering gives every group channels of its
    /// own), set by engines whose later steps forward what earlier steps delivered: a
    /// threadblock then holds one stage of that pipeline, so the runtime's slice-by-slice
    /// replay overlaps the stages of consecutive slices instead of taking each slice through
    /// every step before the next; `None` puts every step in one group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_groups: Option<Vec<usize>>,
    /// The most chunks the lowering sends as one message (MSCCL's `cnt`) in each step: a
    /// run of sends over one link within a step, of consecutive pieces of one rank's data
    /// (of an allreduce: consecutive addresses), aligned on multiples of the count, goes as
    /// one transfer. Set by engines whose pieces are finer than they need to be except
    /// where a pipeline fills or drains (the rail ring): small messages there, and few
    /// transfers per connection elsewhere (the runtimes run at most 64 per threadblock);
    /// and by the torus bucket's allreduce, whose blocks would not fit otherwise. `None`:
    /// one chunk per message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_chunks: Option<Vec<usize>>,
    /// Each link carries one transfer at a time in step order: set by schedules timed for
    /// such links ([`crate::layout::retime`], list schedules, grown trees); their twins with
    /// paced sends are tried (`lower::paced_twins`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub serial_links: bool,
    /// The place of each rank in the order the lowering breaks ties between ranks in (a
    /// step's sends across links, a rank's threadblocks by peer). Set by
    /// [`Algorithm::renumbered`] to the numbering the algorithm was made in, so that a
    /// renumbered algorithm lowers to the same program renumbered; `None`: rank ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_order: Option<Vec<usize>>,
}

impl Algorithm {
    /// The external (read or hand-written) algorithm `name` of `steps` for `collective` on
    /// `topology`, with no lowering hints (channels, step groups, messages and serial links
    /// left to the lowering's defaults).
    pub fn plain(
        name: impl Into<String>,
        topology: impl Into<String>,
        collective: Collective,
        steps: Vec<Step>,
    ) -> Algorithm {
        Algorithm {
            name: name.into(),
            origin: Origin::default(),
            topology: topology.into(),
            collective,
            steps,
            piece_channels: None,
            step_groups: None,
            message_chunks: None,
            serial_links: false,
            rank_order: None,
        }
    }

    /// The algorithm of `family` made of `steps` for `collective` on `topology`, named by
    /// [`crate::origin::render`], with no lowering hints.
    pub fn made(
        family: Family,
        topology: impl Into<String>,
        collective: Collective,
        steps: Vec<Step>,
    ) -> Algorithm {
        let mut a = Algorithm::plain(String::new(), topology, collective, steps);
        a.origin = Origin::of(family);
        a.renamed()
    }

    /// The same algorithm with its name rendered anew from its origin, collective, topology,
    /// steps, rounds and chunks (an external algorithm keeps its name).
    pub fn renamed(mut self) -> Algorithm {
        if self.origin.family != Family::External {
            self.name = crate::origin::render(NameParts {
                kind: self.collective.kind,
                topology: &self.topology,
                origin: &self.origin,
                steps: self.num_steps(),
                rounds: self.rounds(),
                chunks: self.chunks(),
            });
        }
        self
    }

    /// The same algorithm as one of `family`, named after it.
    pub fn of_family(mut self, family: Family) -> Algorithm {
        self.origin.family = family;
        self.renamed()
    }

    /// Whether `other` is this schedule under the same name and step groups (what a list
    /// of candidates keeps once).
    pub fn same_schedule_as(&self, other: &Algorithm) -> bool {
        self.origin == other.origin
            && self.collective.kind == other.collective.kind
            && self.topology == other.topology
            && (self.num_steps(), self.rounds(), self.chunks())
                == (other.num_steps(), other.rounds(), other.chunks())
            && self.step_groups == other.step_groups
    }

    /// Number of steps S.
    pub fn num_steps(&self) -> usize {
        self.steps.len()
    }

    /// Total rounds R.
    pub fn rounds(&self) -> u32 {
        self.steps.iter().map(|s| s.rounds).sum()
    }

    /// Chunks per original chunk C.
    pub fn chunks(&self) -> usize {
        self.collective.chunks_per_rank
    }

    /// Rounds per chunk R/C, the bandwidth cost.
    pub fn rounds_per_chunk(&self) -> Ratio<u64> {
        Ratio::new(self.rounds() as u64, self.chunks() as u64)
    }

    /// Estimated time in µs for nccl-tests message size `size` bytes:
    /// `S·alpha + (R/C)·unit·beta`, with `unit` the bytes of one original chunk, alpha the
    /// largest link latency and beta the time per byte at one capacity unit.
    pub fn estimated_time_us(&self, topology: &Topology, size: f64) -> f64 {
        cost_us(
            topology,
            self.collective.kind,
            self.collective.ranks,
            self.num_steps(),
            self.rounds_per_chunk(),
            size,
        )
    }

    /// The same algorithm with every send reversed and the steps in reverse order; turns a
    /// non-combining algorithm on the reversed topology into its combining dual (named after
    /// its new collective).
    pub fn reversed(&self, collective: Collective, reduce: bool) -> Algorithm {
        let steps = self
            .steps
            .iter()
            .rev()
            .map(|s| Step {
                rounds: s.rounds,
                reduce,
                sends: s
                    .sends
                    .iter()
                    .rev()
                    .map(|x| Send {
                        chunk: x.chunk,
                        src: x.dst,
                        dst: x.src,
                    })
                    .collect(),
            })
            .collect();
        Algorithm {
            name: self.name.clone(),
            origin: self.origin.clone(),
            topology: self.topology.clone(),
            collective,
            steps,
            piece_channels: self.piece_channels,
            step_groups: self
                .step_groups
                .as_ref()
                .map(|g| g.iter().rev().copied().collect()),
            message_chunks: self
                .message_chunks
                .as_ref()
                .map(|m| m.iter().rev().copied().collect()),
            serial_links: self.serial_links,
            rank_order: self.rank_order.clone(),
        }
        .renamed()
    }

    /// The same algorithm on the fabric renumbered back: rank `r` of this algorithm is rank
    /// `back[r]` of the result, and every address follows the rank it belongs to (an
    /// allgather's or reduce-scatter's owner, an alltoall's source and destination; an
    /// allreduce's addresses all end everywhere and stay), for a
    /// named collective whose root `root` (already in the result's numbering) is fixed by the
    /// renumbering. `None` for a custom collective (its addresses have no owner to follow).
    pub fn renumbered(&self, back: &[usize], root: usize) -> Option<Result<Algorithm>> {
        use crate::collective::Kind;
        let kind = self.collective.kind;
        let (n, c) = (self.collective.ranks, self.chunks());
        let address = |a: usize| -> usize {
            match kind {
                Kind::AllGather | Kind::Gather | Kind::Scatter | Kind::ReduceScatter => {
                    back[a / c] * c + a % c
                }
                Kind::AllToAll => {
                    let (pair, k) = (a / c, a % c);
                    (back[pair / n] * n + back[pair % n]) * c + k
                }
                // Every address of these ends on the same ranks: kept, with the runs of
                // consecutive addresses a layout may have made (an allreduce's messages).
                Kind::AllReduce | Kind::Broadcast | Kind::Reduce | Kind::Custom => a,
            }
        };
        if kind == Kind::Custom {
            return None;
        }
        let collective = match Collective::new(kind, n, root, c) {
            Ok(collective) => collective,
            Err(e) => return Some(Err(e)),
        };
        // Ties between ranks stay broken as in the numbering the algorithm was made in.
        let mut order = vec![0; n];
        for (r, &b) in back.iter().enumerate() {
            order[b] = self.rank_order.as_ref().map_or(r, |o| o[r]);
        }
        let steps = self
            .steps
            .iter()
            .map(|s| Step {
                rounds: s.rounds,
                reduce: s.reduce,
                sends: s
                    .sends
                    .iter()
                    .map(|x| Send {
                        chunk: address(x.chunk),
                        src: back[x.src],
                        dst: back[x.dst],
                    })
                    .collect(),
            })
            .collect();
        Some(Ok(Algorithm {
            name: self.name.clone(),
            origin: self.origin.clone(),
            topology: self.topology.clone(),
            collective,
            steps,
            piece_channels: self.piece_channels,
            step_groups: self.step_groups.clone(),
            message_chunks: self.message_chunks.clone(),
            serial_links: self.serial_links,
            rank_order: Some(order),
        }))
    }

    /// The same non-combining algorithm without dead sends: a send to a rank that already
    /// holds the address, or whose receiver neither must end with the address nor forwards
    /// it later, carries nothing useful. Engines may leave such sends in (they cost nothing
    /// in the encoding); reversed into a combining algorithm they would become sends of data
    /// the sender never held, or count a contribution twice, so duals are pruned before
    /// reversal.
    pub fn without_dead_sends(&self) -> Algorithm {
        use crate::pair_set::PairSet;
        let mut steps = self.steps.clone();
        let chunks = &self.collective.chunks;
        // Dense sets over every address and rank named anywhere (a 1024-rank algorithm has
        // millions of pairs).
        let addresses = (chunks.iter().map(|c| c.address))
            .chain(steps.iter().flat_map(|s| s.sends.iter().map(|x| x.chunk)));
        let ranks = (chunks
            .iter()
            .flat_map(|c| c.pre.iter().chain(c.post.iter())))
        .chain(steps.iter().flat_map(|s| s.sends.iter().map(|x| &x.dst)))
        .chain(steps.iter().flat_map(|s| s.sends.iter().map(|x| &x.src)))
        .max()
        .map_or(0, |&r| r + 1);
        let empty = PairSet::new(addresses, ranks);
        let at =
            |set: &PairSet, x: &Send| set.position(x.chunk, x.dst).expect("every pair is known");
        // Forward: drop sends to ranks that hold the address already (or get it twice).
        let mut held = empty.clone();
        for c in chunks {
            for &r in &c.pre {
                held.insert(c.address, r);
            }
        }
        let mut arriving = empty.clone();
        for step in steps.iter_mut() {
            step.sends
                .retain(|x| !held.contains_at(at(&held, x)) && arriving.insert_at(at(&held, x)));
            for x in &step.sends {
                let p = at(&held, x);
                held.insert_at(p);
                arriving.remove_at(p);
            }
        }
        // (address, rank) pairs that must hold the address after the current step.
        let mut live = empty;
        for c in chunks {
            for &r in c.post.iter() {
                live.insert(c.address, r);
            }
        }
        for step in steps.iter_mut().rev() {
            step.sends.retain(|x| live.contains_at(at(&live, x)));
            for x in &step.sends {
                live.insert(x.chunk, x.src);
            }
        }
        Algorithm {
            steps,
            ..self.clone()
        }
    }

    /// The same algorithm at `chunks` = k·C pieces per original chunk: every piece is cut in
    /// k and every send and round is repeated k times (same steps, same rounds per chunk).
    /// Addresses follow the `original × C + piece` layout of every collective, so a message
    /// of m pieces becomes one of m·k.
    pub fn refined(&self, chunks: usize) -> Algorithm {
        let c = self.chunks();
        assert!(
            chunks.is_multiple_of(c),
            "refine to a multiple of the chunk count"
        );
        let k = chunks / c;
        let map = |a: usize, j: usize| (a / c) * chunks + (a % c) * k + j;
        let mut collective = self.collective.clone();
        collective.chunks_per_rank = chunks;
        collective.chunks = self
            .collective
            .chunks
            .iter()
            .flat_map(|ch| {
                (0..k).map(move |j| Chunk {
                    address: map(ch.address, j),
                    ..ch.clone()
                })
            })
            .collect();
        let steps = self
            .steps
            .iter()
            .map(|s| Step {
                rounds: s.rounds * k as u32,
                reduce: s.reduce,
                sends: s
                    .sends
                    .iter()
                    .flat_map(|x| {
                        (0..k).map(move |j| Send {
                            chunk: map(x.chunk, j),
                            ..*x
                        })
                    })
                    .collect(),
            })
            .collect();
        Algorithm {
            name: self.name.clone(),
            origin: self.origin.clone(),
            topology: self.topology.clone(),
            collective,
            steps,
            piece_channels: self.piece_channels,
            step_groups: self.step_groups.clone(),
            message_chunks: self
                .message_chunks
                .as_ref()
                .map(|m| m.iter().map(|&x| x * k).collect()),
            serial_links: self.serial_links,
            rank_order: self.rank_order.clone(),
        }
    }

    /// The most chunks per message in each step ([`Algorithm::message_chunks`]; all 1 when
    /// unset).
    pub fn message_chunks_or_one(&self) -> Vec<usize> {
        self.message_chunks
            .clone()
            .unwrap_or_else(|| vec![1; self.steps.len()])
    }

    /// Reads an algorithm from its JSON file.
    pub fn read(path: &str) -> Result<Algorithm> {
        let text = std::fs::read_to_string(path).with_context(|| format!("{path}: cannot read"))?;
        serde_json::from_str(&text).map_err(|e| crate::util::json_error(path, &e))
    }
}

/// Gives the algorithms of one run distinct names (and so distinct files): with
/// `collective_file`, a custom collective's algorithms are named after the file
/// (`custom-STEM-...` instead of `custom-...`); algorithms that still share a name (two
/// different MILP answers with the same steps, rounds and chunks) get a short hash of their
/// content appended (`...-c3-1a2b3c`), and identical copies a counter.
pub fn name_uniquely(algorithms: &mut [Algorithm], collective_file: Option<&std::path::Path>) {
    if let Some(stem) = collective_file.and_then(|p| p.file_stem()) {
        let stem: String = stem
            .to_string_lossy()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(24)
            .collect();
        for a in algorithms.iter_mut() {
            if let Some(rest) = a.name.strip_prefix("custom-") {
                // Cut in the tag, like every name, to fit with `-inplace`.
                a.name = shortened(&format!("custom-{stem}-{rest}"), MAX_NAME);
            }
        }
    }
    let count =
        |algorithms: &[Algorithm], name: &str| algorithms.iter().filter(|a| a.name == name).count();
    let shared: Vec<bool> = algorithms
        .iter()
        .map(|a| count(algorithms, &a.name) > 1)
        .collect();
    for (a, shared) in algorithms.iter_mut().zip(shared) {
        if shared {
            let hash = format!("-{:06x}", content_hash(a) & 0xff_ffff);
            a.name = format!("{}{hash}", shortened(&a.name, MAX_NAME - hash.len()));
        }
    }
    for i in 1..algorithms.len() {
        if algorithms[..i].iter().any(|a| a.name == algorithms[i].name) {
            // Cut to leave room for the suffix: every name fits the runtimes' 63 characters
            // with `-inplace`.
            let base = algorithms[i].name.clone();
            let numbered = |k: usize| {
                let suffix = format!("-{k}");
                format!("{}{suffix}", shortened(&base, MAX_NAME - suffix.len()))
            };
            let mut k = 2;
            while algorithms.iter().any(|a| a.name == numbered(k)) {
                k += 1;
            }
            algorithms[i].name = numbered(k);
        }
    }
}

use crate::origin::shortened;
pub use crate::origin::MAX_NAME;

/// FNV-1a hash of an algorithm's collective and steps (not its name): equal for equal
/// schedules on every machine and in every run.
fn content_hash(a: &Algorithm) -> u64 {
    let bytes = serde_json::to_vec(&(&a.collective, &a.steps)).unwrap_or_default();
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The k-synchronous cost model `T = S·alpha + (R/C)·unit·beta` in µs (see
/// [`Algorithm::estimated_time_us`]).
pub fn cost_us(
    topology: &Topology,
    kind: crate::collective::Kind,
    ranks: usize,
    steps: usize,
    rounds_per_chunk: Ratio<u64>,
    size: f64,
) -> f64 {
    let alpha = topology.links.iter().map(|l| l.alpha).fold(0.0, f64::max);
    let unit_gbps = topology.capacities().map(|c| c.unit_gbps).unwrap_or(1.0);
    let unit_bytes = size / kind.units_per_buffer(ranks) as f64;
    let rpc = *rounds_per_chunk.numer() as f64 / *rounds_per_chunk.denom() as f64;
    steps as f64 * alpha + rpc * unit_bytes / (unit_gbps * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Kind;

    #[test]
    fn message_sizes_follow_reversal_and_refinement() {
        let step = |src, dst| Step {
            rounds: 2,
            reduce: false,
            sends: (0..2).map(|chunk| Send { chunk, src, dst }).collect(),
        };
        let a = Algorithm {
            name: "broadcast-line_3".into(),
            origin: Default::default(),
            topology: "line:3".into(),
            collective: Collective::new(Kind::Broadcast, 3, 0, 2).unwrap(),
            steps: vec![step(0, 1), step(1, 2)],
            piece_channels: None,
            step_groups: None,
            message_chunks: Some(vec![2, 1]),
            serial_links: false,
            rank_order: None,
        };
        let reduce = Collective::new(Kind::Reduce, 3, 0, 2).unwrap();
        assert_eq!(a.reversed(reduce, true).message_chunks, Some(vec![1, 2]));
        // Each piece cut in three: a message of m pieces carries 3m.
        assert_eq!(a.refined(6).message_chunks, Some(vec![6, 3]));
        let plain = Algorithm {
            message_chunks: None,
            serial_links: false,
            ..a
        };
        assert_eq!(plain.message_chunks_or_one(), vec![1, 1]);
        assert_eq!(plain.refined(4).message_chunks, None);
    }

    #[test]
    fn dead_sends_are_dropped() {
        // Allgather on 4 ranks, one chunk each; chunk r starts on rank r.
        let send = |chunk, src, dst| Send { chunk, src, dst };
        let step = |sends: Vec<Send>| Step {
            rounds: 1,
            reduce: false,
            sends,
        };
        let a = Algorithm::plain(
            "allgather-ring_4",
            "ring:4",
            Collective::new(Kind::AllGather, 4, 0, 1).unwrap(),
            vec![
                // The second copy of chunk 0 to rank 1 in one step, and chunk 1 to its own
                // holder, are dead.
                step(vec![
                    send(0, 0, 1),
                    send(0, 2, 1),
                    send(1, 0, 1),
                    send(2, 2, 3),
                ]),
                step(vec![send(0, 1, 2), send(0, 3, 1), send(2, 3, 0)]),
                step(vec![
                    send(0, 2, 3),
                    send(1, 1, 2),
                    send(2, 0, 1),
                    send(3, 3, 0),
                ]),
            ],
        );
        let pruned = a.without_dead_sends();
        let kept: Vec<Vec<Send>> = pruned.steps.iter().map(|s| s.sends.clone()).collect();
        assert_eq!(
            kept,
            vec![
                vec![send(0, 0, 1), send(2, 2, 3)],
                // Rank 1 holds chunk 0 already.
                vec![send(0, 1, 2), send(2, 3, 0)],
                vec![send(0, 2, 3), send(1, 1, 2), send(2, 0, 1), send(3, 3, 0)],
            ]
        );
        // Gather to rank 0: chunk 1 sent to rank 2, which never forwards it, is dead.
        let gather = Algorithm {
            name: "gather-line_3".into(),
            origin: Default::default(),
            collective: Collective::new(Kind::Gather, 3, 0, 1).unwrap(),
            steps: vec![
                step(vec![send(1, 1, 2), send(2, 2, 1)]),
                step(vec![send(1, 1, 0), send(2, 1, 0)]),
            ],
            ..a
        };
        let pruned = gather.without_dead_sends();
        assert_eq!(pruned.steps[0].sends, vec![send(2, 2, 1)]);
        assert_eq!(pruned.steps[1].sends, gather.steps[1].sends);
    }
}
