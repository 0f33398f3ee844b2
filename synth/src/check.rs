//! The independent algorithm checker: re-simulates holdings step by step and recounts
//! bandwidth per link and per switch constraint, trusting nothing the solver said.

use crate::algorithm::Algorithm;
use crate::topology::Topology;
use std::collections::HashMap;
use std::time::Instant;
use thiserror::Error;

/// Why an algorithm is wrong.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CheckError {
    /// The algorithm was made for another number of ranks.
    #[error("algorithm has {algorithm} ranks but topology `{topology}` has {ranks}")]
    RankMismatch {
        algorithm: usize,
        topology: String,
        ranks: usize,
    },
    /// A step with zero rounds.
    #[error("step {step} has 0 rounds")]
    ZeroRounds { step: usize },
    /// A send over a link the topology does not have.
    #[error("step {step}: chunk {chunk} sent {src}->{dst}, but there is no such link")]
    NoLink {
        step: usize,
        chunk: usize,
        src: usize,
        dst: usize,
    },
    /// A send of data the sender does not hold.
    #[error("step {step}: rank {src} sends chunk {chunk} to {dst} but does not hold it")]
    NotHeld {
        step: usize,
        chunk: usize,
        src: usize,
        dst: usize,
    },
    /// A link or switch carries more than its capacity allows in a step.
    #[error("step {step}: {what} carries {load} chunks but its capacity is {capacity} x {rounds} rounds")]
    Overloaded {
        step: usize,
        what: String,
        load: usize,
        capacity: u32,
        rounds: u32,
    },
    /// The postcondition does not hold at the end.
    #[error("chunk {chunk} on rank {rank}: {problem}")]
    Postcondition {
        chunk: usize,
        rank: usize,
        problem: String,
    },
    /// A rank holds more chunks than its postcondition plus the extra memory allows.
    #[error("after step {step}, rank {rank} holds {held} chunks it did not start with, but its postcondition has {post} and the extra memory is {extra}")]
    Memory {
        step: usize,
        rank: usize,
        held: usize,
        post: usize,
        extra: usize,
    },
    /// The topology's bandwidths cannot be normalized to integers.
    #[error("{0}")]
    Capacities(String),
    /// The deadline passed before the check finished (see [`check_before`]).
    #[error("time limit reached while checking the algorithm")]
    TimeLimit,
}

/// Contributions held for one address on one rank: which contributing chunks (by slot
/// within the address) have been summed in, one bit each, and whether any was summed in
/// more than once (a sum that counts a contribution twice stays wrong through every later
/// reduction; only a copy of other data replaces it). A bit per contributor, not a count:
/// a 1024-rank reduce-scatter holds millions of partial sums of 1024 contributors each.
#[derive(Clone)]
struct Contents {
    bits: Vec<u64>,
    twice: bool,
}

impl Contents {
    /// Nothing summed in yet, for `width` contributors.
    fn empty(width: usize) -> Contents {
        Contents {
            bits: vec![0; width.div_ceil(64)],
            twice: false,
        }
    }

    /// Sums `other` in.
    fn add(&mut self, other: &Contents) {
        for (t, o) in self.bits.iter_mut().zip(&other.bits) {
            self.twice |= *t & o != 0;
            *t |= o;
        }
        self.twice |= other.twice;
    }

    /// Contributors not summed in, of `width`.
    fn missing(&self, width: usize) -> usize {
        width
            - self
                .bits
                .iter()
                .map(|b| b.count_ones() as usize)
                .sum::<usize>()
    }
}

/// What every rank holds of every address during the replay.
enum Holdings {
    /// No address combines and no step reduces (allgather, broadcast, alltoall, ...): whether
    /// a rank holds an address says everything, one bit per (address, rank), so a 1024-rank
    /// allgather's four million holdings take half a megabyte.
    Bits {
        /// Dense index of each address.
        index: HashMap<usize, usize>,
        ranks: usize,
        bits: Vec<u64>,
    },
    /// Contribution counts per (address, rank), for reductions.
    Counts(HashMap<(usize, usize), Contents>),
}

impl Holdings {
    /// The bit of (address, rank), if the address is known and the rank on the fabric (an
    /// algorithm file may name any rank in a condition).
    fn bit(
        index: &HashMap<usize, usize>,
        ranks: usize,
        address: usize,
        rank: usize,
    ) -> Option<usize> {
        index
            .get(&address)
            .filter(|_| rank < ranks)
            .map(|&a| a * ranks + rank)
    }

    /// Whether `rank` holds `address` at all.
    fn holds(&self, address: usize, rank: usize) -> bool {
        match self {
            Holdings::Bits { index, ranks, bits } => Self::bit(index, *ranks, address, rank)
                .is_some_and(|b| bits[b / 64] >> (b % 64) & 1 == 1),
            Holdings::Counts(state) => state.contains_key(&(address, rank)),
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
    let link_index: HashMap<(usize, usize), usize> = topology
        .links
        .iter()
        .enumerate()
        .map(|(i, l)| ((l.src, l.dst), i))
        .collect();
    // The switch constraints covering each link, once (not every constraint per send).
    let governing = topology.governing_constraints(&topology.out_link_ids());

    // Which contributor slot each chunk occupies within its address.
    let by_address = coll.by_address();
    let mut slot_of = vec![0usize; coll.chunks.len()];
    for members in by_address.values() {
        for (slot, &m) in members.iter().enumerate() {
            slot_of[m] = slot;
        }
    }
    let reduces =
        by_address.values().any(|m| m.len() > 1) || algorithm.steps.iter().any(|s| s.reduce);
    let n = topology.ranks;
    let mut state = if reduces {
        Holdings::Counts(HashMap::new())
    } else {
        let index: HashMap<usize, usize> = by_address
            .keys()
            .enumerate()
            .map(|(i, &a)| (a, i))
            .collect();
        let bits = vec![0u64; (index.len() * n).div_ceil(64)];
        Holdings::Bits {
            index,
            ranks: n,
            bits,
        }
    };
    for (i, chunk) in coll.chunks.iter().enumerate() {
        if i.is_multiple_of(1024) && expired() {
            return Err(CheckError::TimeLimit);
        }
        let width = by_address[&chunk.address].len();
        for &r in &chunk.pre {
            match &mut state {
                Holdings::Bits { index, ranks, bits } => {
                    if let Some(b) = Holdings::bit(index, *ranks, chunk.address, r) {
                        bits[b / 64] |= 1 << (b % 64);
                    }
                }
                Holdings::Counts(counts) => {
                    let entry = counts
                        .entry((chunk.address, r))
                        .or_insert_with(|| Contents::empty(width));
                    let slot = slot_of[i];
                    entry.bits[slot / 64] |= 1 << (slot % 64);
                }
            }
        }
    }

    let mut link_load = vec![0usize; topology.links.len()];
    let mut switch_load = vec![0usize; topology.switches.len()];
    for (s, step) in algorithm.steps.iter().enumerate() {
        if expired() {
            return Err(CheckError::TimeLimit);
        }
        if step.rounds == 0 {
            return Err(CheckError::ZeroRounds { step: s });
        }
        link_load.iter_mut().for_each(|x| *x = 0);
        switch_load.iter_mut().for_each(|x| *x = 0);
        // Every send reads what its sender held before the step: read them all, then write.
        let mut reads: Vec<Contents> = Vec::new();
        for send in &step.sends {
            let Some(&l) = link_index.get(&(send.src, send.dst)) else {
                return Err(CheckError::NoLink {
                    step: s,
                    chunk: send.chunk,
                    src: send.src,
                    dst: send.dst,
                });
            };
            link_load[l] += 1;
            for &k in &governing[l] {
                switch_load[k] += 1;
            }
            if !state.holds(send.chunk, send.src) {
                return Err(CheckError::NotHeld {
                    step: s,
                    chunk: send.chunk,
                    src: send.src,
                    dst: send.dst,
                });
            }
            if let Holdings::Counts(counts) = &state {
                reads.push(counts[&(send.chunk, send.src)].clone());
            }
        }
        match &mut state {
            Holdings::Bits { index, ranks, bits } => {
                for send in &step.sends {
                    let b = Holdings::bit(index, *ranks, send.chunk, send.dst)
                        .expect("the sender holds it, so the address is known");
                    bits[b / 64] |= 1 << (b % 64);
                }
            }
            Holdings::Counts(counts) => {
                for (send, data) in step.sends.iter().zip(reads) {
                    use std::collections::hash_map::Entry;
                    match counts.entry((send.chunk, send.dst)) {
                        Entry::Occupied(mut held) if step.reduce => held.get_mut().add(&data),
                        Entry::Occupied(mut held) => *held.get_mut() = data,
                        Entry::Vacant(slot) => {
                            slot.insert(data);
                        }
                    }
                }
            }
        }
        for (l, &load) in link_load.iter().enumerate() {
            let link = &topology.links[l];
            overload(
                s,
                || format!("link {}->{}", link.src, link.dst),
                load,
                caps.links[l],
                step.rounds,
            )?;
        }
        for (k, &load) in switch_load.iter().enumerate() {
            overload(
                s,
                || format!("switch constraint `{}`", topology.switches[k].name),
                load,
                caps.switches[k],
                step.rounds,
            )?;
        }
    }

    if expired() {
        return Err(CheckError::TimeLimit);
    }
    for (i, chunk) in coll.chunks.iter().enumerate() {
        if i.is_multiple_of(1024) && expired() {
            return Err(CheckError::TimeLimit);
        }
        let width = by_address[&chunk.address].len();
        for &r in &chunk.post {
            let never = || CheckError::Postcondition {
                chunk: chunk.address,
                rank: r,
                problem: "never arrives".into(),
            };
            let counts = match &state {
                Holdings::Bits { .. } if state.holds(chunk.address, r) => continue,
                Holdings::Bits { .. } => return Err(never()),
                Holdings::Counts(counts) => counts.get(&(chunk.address, r)),
            };
            match counts {
                None => return Err(never()),
                Some(c) if c.missing(width) > 0 => {
                    let missing = c.missing(width);
                    return Err(CheckError::Postcondition {
                        chunk: chunk.address,
                        rank: r,
                        problem: format!("{missing} of {width} contributions missing"),
                    });
                }
                Some(c) if c.twice => {
                    return Err(CheckError::Postcondition {
                        chunk: chunk.address,
                        rank: r,
                        problem: "a contribution is counted more than once".into(),
                    })
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

fn overload(
    step: usize,
    what: impl FnOnce() -> String,
    load: usize,
    capacity: u32,
    rounds: u32,
) -> Result<(), CheckError> {
    if load > capacity as usize * rounds as usize {
        return Err(CheckError::Overloaded {
            step,
            what: what(),
            load,
            capacity,
            rounds,
        });
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
    use super::Contents;

    fn of(width: usize, slots: &[usize]) -> Contents {
        let mut c = Contents::empty(width);
        for &s in slots {
            c.bits[s / 64] |= 1 << (s % 64);
        }
        c
    }

    #[test]
    fn contents_count_missing_and_doubled_contributions() {
        // 130 contributors span three words.
        let mut sum = of(130, &[0, 64, 129]);
        assert_eq!(sum.missing(130), 127);
        sum.add(&of(130, &[1, 65]));
        assert_eq!(sum.missing(130), 125);
        assert!(!sum.twice);
        // Summing slot 64 in again poisons the sum, and whatever it is summed into.
        sum.add(&of(130, &[64]));
        assert!(sum.twice);
        let mut later = of(130, &[2]);
        later.add(&sum);
        assert!(later.twice && later.missing(130) == 124);
    }
}
