//! The independent algorithm checker: re-simulates holdings step by step and recounts
//! bandwidth per link and per switch constraint, trusting nothing the solver said.

use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Collective;
use crate::load::{Loads, Resource};
use crate::pair_set::PairSet;
use crate::topology::{Capacities, Topology, TopologyIndex};
use std::collections::BTreeMap;
use std::time::Instant;
use thiserror::Error;

/// Why an algorithm is wrong.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CheckError {
    /// The algorithm was made for another number of ranks.
    #[error("algorithm has {algorithm} ranks but topology `{topology}` has {ranks}")]
    RankMismatch {
        /// Ranks of the algorithm.
        algorithm: usize,
        /// The topology's name.
        topology: String,
        /// Ranks of the topology.
        ranks: usize,
    },
    /// A step with zero rounds.
    #[error("step {step} has 0 rounds")]
    ZeroRounds {
        /// The step (from 0).
        step: usize,
    },
    /// A send over a link the topology does not have.
    #[error("step {step}: chunk {chunk} sent {src}->{dst}, but there is no such link")]
    NoLink {
        /// The step (from 0).
        step: usize,
        /// The chunk (address).
        chunk: usize,
        /// Sending rank.
        src: usize,
        /// Receiving rank.
        dst: usize,
    },
    /// A send of data the sender does not hold.
    #[error("step {step}: rank {src} sends chunk {chunk} to {dst} but does not hold it")]
    NotHeld {
        /// The step (from 0).
        step: usize,
        /// The chunk (address).
        chunk: usize,
        /// Sending rank.
        src: usize,
        /// Receiving rank.
        dst: usize,
    },
    /// A link or switch carries more than its capacity allows in a step.
    #[error("step {step}: {what} carries {load} chunks but its capacity is {capacity} x {rounds} rounds")]
    Overloaded {
        /// The step (from 0).
        step: usize,
        /// The link or switch constraint.
        what: String,
        /// Chunks it carries in the step.
        load: usize,
        /// Its capacity per round.
        capacity: u32,
        /// The step's rounds.
        rounds: u32,
    },
    /// The postcondition does not hold at the end.
    #[error("chunk {chunk} on rank {rank}: {problem}")]
    Postcondition {
        /// The chunk (address).
        chunk: usize,
        /// The rank.
        rank: usize,
        /// What is wrong.
        problem: String,
    },
    /// A rank holds more chunks than its postcondition plus the extra memory allows.
    #[error("after step {step}, rank {rank} holds {held} chunks it did not start with, but its postcondition has {post} and the extra memory is {extra}")]
    Memory {
        /// The step (from 0).
        step: usize,
        /// The rank.
        rank: usize,
        /// Chunks it holds that it did not start with.
        held: usize,
        /// Chunks of its postcondition.
        post: usize,
        /// The extra memory allowed.
        extra: usize,
    },
    /// The topology's bandwidths cannot be normalized to integers.
    #[error("{0}")]
    Capacities(String),
    /// The deadline passed before the check finished (see [`check_before`]).
    #[error("time limit reached while checking the algorithm")]
    TimeLimit,
}

/// Sums `src` (one bit per contributor) into `dst`; true if a contributor was in both (a
/// sum that counts a contribution twice stays wrong through every later reduction; only a
/// copy of other data replaces it).
fn add_into(dst: &mut [u64], src: &[u64]) -> bool {
    let mut twice = false;
    for (t, o) in dst.iter_mut().zip(src) {
        twice |= *t & o != 0;
        *t |= o;
    }
    twice
}

/// Contributors of `width` not summed into `bits`.
fn missing(bits: &[u64], width: usize) -> usize {
    width - bits.iter().map(|b| b.count_ones() as usize).sum::<usize>()
}

/// Contributions per (address, rank) for reductions, dense: which pairs are held, which
/// count a contribution twice, and one bit per contributor (by its slot within the address)
/// that has been summed in. A bit per contributor, not a count, and flat arrays, not a map:
/// a 1024-rank reduce-scatter holds millions of partial sums of 1024 contributors each.
struct Sums {
    held: PairSet,
    twice: Vec<bool>,
    /// Words per pair of each dense address, and where its rank 0's words start.
    words: Vec<usize>,
    start: Vec<usize>,
    data: Vec<u64>,
    ranks: usize,
}

impl Sums {
    /// Nothing held, over `held`'s addresses with `widths` contributors each (by dense index).
    fn new(held: PairSet, widths: &[usize], ranks: usize) -> Sums {
        let words: Vec<usize> = widths.iter().map(|w| w.div_ceil(64)).collect();
        let mut start = Vec::with_capacity(words.len());
        let mut total = 0;
        for &w in &words {
            start.push(total);
            total += w * ranks;
        }
        Sums {
            twice: vec![false; widths.len() * ranks],
            held,
            words,
            start,
            data: vec![0; total],
            ranks,
        }
    }

    /// The contributor bits of the pair at `position`.
    fn range(&self, position: usize) -> std::ops::Range<usize> {
        let (a, r) = (position / self.ranks, position % self.ranks);
        let from = self.start[a] + r * self.words[a];
        from..from + self.words[a]
    }
}

/// What every rank holds of every address during the replay.
enum Holdings {
    /// No address combines and no step reduces (allgather, broadcast, alltoall, ...): whether
    /// a rank holds an address says everything, one bit per (address, rank), so a 1024-rank
    /// allgather's four million holdings take half a megabyte.
    Bits(PairSet),
    /// Contributions per (address, rank), for reductions.
    Sums(Sums),
}

impl Holdings {
    /// Whether `rank` holds `address` at all.
    fn holds(&self, address: usize, rank: usize) -> bool {
        match self {
            Holdings::Bits(set) => set.contains(address, rank),
            Holdings::Sums(sums) => sums.held.contains(address, rank),
        }
    }
}

/// Checks `algorithm` on `topology`: every send uses a link and sends held data, every
/// link and switch constraint stays within capacity × rounds in every step, and at the end
/// every rank in a chunk's postcondition holds its address with every contribution exactly once.
pub fn check(algorithm: &Algorithm, topology: &Topology) -> Result<(), CheckError> {
    check_before(algorithm, topology, None)
}

/// [`check`], giving up with [`CheckError::TimeLimit`] once `deadline` passes (checked
/// every step: huge algorithms take a while).
pub fn check_before(
    algorithm: &Algorithm,
    topology: &Topology,
    deadline: Option<Instant>,
) -> Result<(), CheckError> {
    let expired = || deadline.is_some_and(|d| Instant::now() >= d);
    let coll = &algorithm.collective;
    if coll.ranks != topology.ranks {
        return Err(CheckError::RankMismatch {
            algorithm: coll.ranks,
            topology: topology.name.clone(),
            ranks: topology.ranks,
        });
    }
    let caps = topology
        .capacities()
        .map_err(|e| CheckError::Capacities(format!("{e:#}")))?;
    let index = topology.index();
    let by_address = coll.by_address();
    let mut state = initial_holdings(algorithm, &by_address, &expired)?;
    let mut replay = Replay {
        topology,
        index: &index,
        caps: &caps,
        loads: Loads::zero(topology.links.len(), topology.switches.len()),
        reads: Vec::new(),
        read_twice: Vec::new(),
    };
    for (s, step) in algorithm.steps.iter().enumerate() {
        if expired() {
            return Err(CheckError::TimeLimit);
        }
        replay.step(s, step, &mut state)?;
    }
    if expired() {
        return Err(CheckError::TimeLimit);
    }
    check_postconditions(coll, &by_address, &state, &expired)
}

/// The holdings before the first step: every chunk at the ranks of its precondition, in
/// the contributor slot it occupies within its address when the collective reduces.
fn initial_holdings(
    algorithm: &Algorithm,
    by_address: &BTreeMap<usize, Vec<usize>>,
    expired: &impl Fn() -> bool,
) -> Result<Holdings, CheckError> {
    let coll = &algorithm.collective;
    let mut slot_of = vec![0usize; coll.chunks.len()];
    for members in by_address.values() {
        for (slot, &m) in members.iter().enumerate() {
            slot_of[m] = slot;
        }
    }
    let reduces =
        by_address.values().any(|m| m.len() > 1) || algorithm.steps.iter().any(|s| s.reduce);
    let n = coll.ranks;
    let pairs = PairSet::new(by_address.keys().copied(), n);
    let mut state = if reduces {
        let widths: Vec<usize> = by_address.values().map(Vec::len).collect();
        Holdings::Sums(Sums::new(pairs, &widths, n))
    } else {
        Holdings::Bits(pairs)
    };
    for (i, chunk) in coll.chunks.iter().enumerate() {
        if i.is_multiple_of(1024) && expired() {
            return Err(CheckError::TimeLimit);
        }
        for &r in &chunk.pre {
            match &mut state {
                Holdings::Bits(set) => {
                    set.insert(chunk.address, r);
                }
                Holdings::Sums(sums) => {
                    if let Some(p) = sums.held.position(chunk.address, r) {
                        sums.held.insert_at(p);
                        let slot = slot_of[i];
                        let range = sums.range(p);
                        sums.data[range][slot / 64] |= 1 << (slot % 64);
                    }
                }
            }
        }
    }
    Ok(state)
}

/// The replay of the steps: the fabric, and buffers reused from step to step.
struct Replay<'a> {
    topology: &'a Topology,
    index: &'a TopologyIndex,
    caps: &'a Capacities,
    /// Load of each link and switch constraint in the current step.
    loads: Loads,
    /// The contributor words each send of the step read, in send order.
    reads: Vec<u64>,
    /// Whether each send of the step read a sum counting a contribution twice.
    read_twice: Vec<bool>,
}

impl Replay<'_> {
    /// Replays step `s` on `state`: every send reads what its sender held before the step
    /// (read them all, then write), and no link or switch constraint exceeds its capacity.
    fn step(&mut self, s: usize, step: &Step, state: &mut Holdings) -> Result<(), CheckError> {
        if step.rounds == 0 {
            return Err(CheckError::ZeroRounds { step: s });
        }
        self.loads.clear();
        self.reads.clear();
        self.read_twice.clear();
        for send in &step.sends {
            self.read(s, send, state)?;
        }
        match state {
            Holdings::Bits(set) => {
                for send in &step.sends {
                    set.insert(send.chunk, send.dst);
                }
            }
            Holdings::Sums(sums) => self.write_sums(s, step, sums)?,
        }
        self.check_capacities(s, step.rounds)
    }

    /// Counts `send`'s load and reads what its sender holds.
    fn read(&mut self, s: usize, send: &Send, state: &Holdings) -> Result<(), CheckError> {
        let Some(&l) = self.index.link_of.get(&(send.src, send.dst)) else {
            return Err(no_link(s, send));
        };
        self.loads.add(self.index, l);
        if !state.holds(send.chunk, send.src) {
            return Err(CheckError::NotHeld {
                step: s,
                chunk: send.chunk,
                src: send.src,
                dst: send.dst,
            });
        }
        if let Holdings::Sums(sums) = state {
            let p = (sums.held.position(send.chunk, send.src)).expect("held, so known");
            self.reads.extend_from_slice(&sums.data[sums.range(p)]);
            self.read_twice.push(sums.twice[p]);
        }
        Ok(())
    }

    /// Writes what the sends of step `s` read into their receivers: summed in where the
    /// step reduces into a held address, copied otherwise.
    fn write_sums(&self, s: usize, step: &Step, sums: &mut Sums) -> Result<(), CheckError> {
        let mut read = 0;
        for (send, &twice) in step.sends.iter().zip(&self.read_twice) {
            let Some(p) = sums.held.position(send.chunk, send.dst) else {
                return Err(no_link(s, send));
            };
            let range = sums.range(p);
            let data = &self.reads[read..read + range.len()];
            read += range.len();
            if sums.held.contains_at(p) && step.reduce {
                let doubled = add_into(&mut sums.data[range], data);
                sums.twice[p] |= doubled || twice;
            } else {
                sums.data[range].copy_from_slice(data);
                sums.twice[p] = twice;
                sums.held.insert_at(p);
            }
        }
        Ok(())
    }

    /// Whether every link and switch constraint carried at most its capacity × `rounds` in
    /// step `s`.
    fn check_capacities(&self, s: usize, rounds: u32) -> Result<(), CheckError> {
        let Some(over) = self.loads.over_capacity(self.caps, rounds) else {
            return Ok(());
        };
        let what = match over.resource {
            Resource::Link(l) => {
                let link = &self.topology.links[l];
                format!("link {}->{}", link.src, link.dst)
            }
            Resource::Switch(k) => {
                format!("switch constraint `{}`", self.topology.switches[k].name)
            }
        };
        Err(CheckError::Overloaded {
            step: s,
            what,
            load: over.load as usize,
            capacity: over.capacity,
            rounds,
        })
    }
}

/// The error for `send` in step `s` going where there is no link.
fn no_link(s: usize, send: &Send) -> CheckError {
    CheckError::NoLink {
        step: s,
        chunk: send.chunk,
        src: send.src,
        dst: send.dst,
    }
}

/// Whether every rank in a chunk's postcondition holds its address, with every
/// contribution exactly once: each address once per distinct postcondition among its
/// chunks (an allreduce's million chunks per address set share one).
fn check_postconditions(
    coll: &Collective,
    by_address: &BTreeMap<usize, Vec<usize>>,
    state: &Holdings,
    expired: &impl Fn() -> bool,
) -> Result<(), CheckError> {
    for (i, (&address, members)) in by_address.iter().enumerate() {
        if i.is_multiple_of(64) && expired() {
            return Err(CheckError::TimeLimit);
        }
        let width = members.len();
        for &r in coll.distinct_posts(members).iter().flat_map(|p| p.iter()) {
            let problem = |problem: String| CheckError::Postcondition {
                chunk: address,
                rank: r,
                problem,
            };
            if !state.holds(address, r) {
                return Err(problem("never arrives".into()));
            }
            let Holdings::Sums(sums) = state else {
                continue;
            };
            let p = (sums.held.position(address, r)).expect("held, so known");
            let missing = missing(&sums.data[sums.range(p)], width);
            if missing > 0 {
                return Err(problem(format!(
                    "{missing} of {width} contributions missing"
                )));
            }
            if sums.twice[p] {
                return Err(problem("a contribution is counted more than once".into()));
            }
        }
    }
    Ok(())
}

/// Checks SCCL's extra-memory limit: after every step, each rank holds at most as many
/// addresses it did not start with as its postcondition has, plus `extra`. A received address
/// stays where it landed (the lowering never reuses a slot), so this is the count of distinct
/// addresses a rank has received so far that were not in its precondition.
pub fn check_memory(algorithm: &Algorithm, extra: usize) -> Result<(), CheckError> {
    let coll = &algorithm.collective;
    let n = coll.ranks;
    let mut post = vec![std::collections::BTreeSet::new(); n];
    let mut pre = vec![std::collections::BTreeSet::new(); n];
    for chunk in &coll.chunks {
        for &r in chunk.post.iter().filter(|&&r| r < n) {
            post[r].insert(chunk.address);
        }
        for &r in chunk.pre.iter().filter(|&&r| r < n) {
            pre[r].insert(chunk.address);
        }
    }
    let mut held = vec![std::collections::BTreeSet::new(); n];
    for (s, step) in algorithm.steps.iter().enumerate() {
        for send in step.sends.iter().filter(|x| x.dst < n) {
            if !pre[send.dst].contains(&send.chunk) {
                held[send.dst].insert(send.chunk);
            }
        }
        for r in 0..n {
            if held[r].len() > post[r].len() + extra {
                return Err(CheckError::Memory {
                    step: s,
                    rank: r,
                    held: held[r].len(),
                    post: post[r].len(),
                    extra,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{add_into, missing};

    fn of(width: usize, slots: &[usize]) -> Vec<u64> {
        let mut c = vec![0; width.div_ceil(64)];
        for &s in slots {
            c[s / 64] |= 1 << (s % 64);
        }
        c
    }

    #[test]
    fn sums_count_missing_and_doubled_contributions() {
        // 130 contributors span three words.
        let mut sum = of(130, &[0, 64, 129]);
        assert_eq!(missing(&sum, 130), 127);
        assert!(!add_into(&mut sum, &of(130, &[1, 65])));
        assert_eq!(missing(&sum, 130), 125);
        // Summing slot 64 in again counts it twice.
        assert!(add_into(&mut sum, &of(130, &[64])));
        assert_eq!(missing(&sum, 130), 125);
    }
}
