//! Load counting, once for every engine: how many sends each link and each switch
//! constraint carries, and the rounds a step needs (its busiest link or switch constraint's
//! load over its integer capacity, at least 1).
//!
//! Links are looked up in the [`TopologyIndex`]; a send between ranks without a link is not
//! counted (checked algorithms have none).

use crate::algorithm::{Algorithm, Send, Step};
use crate::topology::{Capacities, TopologyIndex};
use num_integer::Integer;
use std::collections::HashMap;

/// The load of each link and each switch constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loads {
    /// Sends over each link, by link id.
    pub links: Vec<u64>,
    /// Sends under each switch constraint, by constraint id.
    pub switches: Vec<u64>,
}

impl Loads {
    /// No load on `links` links and `switches` switch constraints.
    pub fn zero(links: usize, switches: usize) -> Loads {
        Loads {
            links: vec![0; links],
            switches: vec![0; switches],
        }
    }

    /// The loads of `sends` over the links and the `switches` switch constraints of `index`.
    pub fn of<'s>(
        index: &TopologyIndex,
        switches: usize,
        sends: impl IntoIterator<Item = &'s Send>,
    ) -> Loads {
        let mut loads = Loads::zero(index.governing.len(), switches);
        for s in sends {
            if let Some(&l) = index.link_of.get(&(s.src, s.dst)) {
                loads.add(index, l);
            }
        }
        loads
    }

    /// Counts one send over link `link` and under the switch constraints governing it.
    pub fn add(&mut self, index: &TopologyIndex, link: usize) {
        self.links[link] += 1;
        for &j in &index.governing[link] {
            self.switches[j] += 1;
        }
    }

    /// Back to no load.
    pub fn clear(&mut self) {
        self.links.iter_mut().for_each(|x| *x = 0);
        self.switches.iter_mut().for_each(|x| *x = 0);
    }

    /// The first link, else the first switch constraint, whose load exceeds its capacity
    /// under `caps` times `rounds`.
    pub fn over_capacity(&self, caps: &Capacities, rounds: u32) -> Option<Overload> {
        let over = |load: u64, capacity: u32| load > capacity as u64 * rounds as u64;
        let links = (self.links.iter().zip(&caps.links).enumerate())
            .map(|(l, (&load, &capacity))| (Resource::Link(l), load, capacity));
        let switches = (self.switches.iter().zip(&caps.switches).enumerate())
            .map(|(k, (&load, &capacity))| (Resource::Switch(k), load, capacity));
        links
            .chain(switches)
            .find(|&(_, load, capacity)| over(load, capacity))
            .map(|(resource, load, capacity)| Overload {
                resource,
                load,
                capacity,
            })
    }

    /// The busiest link or switch constraint under `caps` as (load, capacity), the largest
    /// load / capacity ((0, 1) for no load; a capacity of 0 counts as 1).
    pub fn busiest(&self, caps: &Capacities) -> (u64, u64) {
        let links = self.links.iter().zip(&caps.links);
        let switches = self.switches.iter().zip(&caps.switches);
        links
            .chain(switches)
            .map(|(&load, &cap)| (load, cap.max(1) as u64))
            .fold((0, 1), |(l, c), (load, cap)| {
                if load * c > l * cap {
                    (load, cap)
                } else {
                    (l, c)
                }
            })
    }
}

/// A link or a switch constraint, by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// Link id.
    Link(usize),
    /// Switch constraint id.
    Switch(usize),
}

/// A link or switch constraint carrying more than its capacity allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overload {
    /// Which one.
    pub resource: Resource,
    /// Its load.
    pub load: u64,
    /// Its capacity per round.
    pub capacity: u32,
}

/// The busiest link or switch constraint of `sends` as (load, capacity), the largest
/// load / capacity ((0, 1) for no sends). Over a whole schedule it is what a pipelined
/// run's bottleneck carries.
pub fn busiest(index: &TopologyIndex, caps: &Capacities, sends: &[Send]) -> (u64, u64) {
    Loads::of(index, caps.switches.len(), sends).busiest(caps)
}

/// The rounds a step with `sends` needs: its busiest link or switch constraint's load over
/// its capacity, at least 1.
pub fn rounds_needed(index: &TopologyIndex, caps: &Capacities, sends: &[Send]) -> u32 {
    let (load, cap) = busiest(index, caps, sends);
    load.div_ceil(cap).max(1) as u32
}

/// A step of `sends` that moves data without reducing it, with the rounds it needs
/// ([`rounds_needed`]): how the tree schedules and constructions turn send lists into steps.
pub fn plain_step(index: &TopologyIndex, caps: &Capacities, sends: Vec<Send>) -> Step {
    Step {
        rounds: rounds_needed(index, caps, &sends),
        reduce: false,
        sends,
    }
}

/// Counters for the rounds of one step after another, over link ids (no lookup, no
/// allocation per step): the greedy engine's inner loop.
pub struct StepRounds<'a> {
    governing: &'a [Vec<usize>],
    link_caps: &'a [u32],
    switch_caps: &'a [u32],
    link_load: Vec<u32>,
    switch_load: Vec<u32>,
}

impl<'a> StepRounds<'a> {
    /// Counters over the links and switch constraints of `index` under `caps`.
    pub fn new(index: &'a TopologyIndex, caps: &'a Capacities) -> StepRounds<'a> {
        StepRounds::over(&index.governing, &caps.links, &caps.switches)
    }

    /// Counters over links governed by `governing` (switch constraint ids per link) with
    /// capacities `link_caps` and `switch_caps`, as a [`TopologyIndex`] and
    /// [`Capacities`] hold them.
    pub fn over(
        governing: &'a [Vec<usize>],
        link_caps: &'a [u32],
        switch_caps: &'a [u32],
    ) -> StepRounds<'a> {
        StepRounds {
            governing,
            link_caps,
            switch_caps,
            link_load: vec![0; link_caps.len()],
            switch_load: vec![0; switch_caps.len()],
        }
    }

    /// The rounds a step needs whose sends cross `links` (one link id per send): its busiest
    /// link or switch constraint's load over its capacity, at least 1.
    pub fn rounds(&mut self, links: impl Iterator<Item = usize> + Clone) -> u32 {
        let mut rounds = 1u32;
        for l in links.clone() {
            self.link_load[l] += 1;
            rounds = rounds.max(self.link_load[l].div_ceil(self.link_caps[l].max(1)));
            for &j in &self.governing[l] {
                self.switch_load[j] += 1;
                rounds = rounds.max(self.switch_load[j].div_ceil(self.switch_caps[j].max(1)));
            }
        }
        for l in links {
            self.link_load[l] = 0;
            for &j in &self.governing[l] {
                self.switch_load[j] = 0;
            }
        }
        rounds
    }
}

/// The most transfers one link (one ordered rank pair) carries over all of `algorithms`,
/// each refined to their least common chunk count.
pub fn busiest_link_transfers(algorithms: &[&Algorithm]) -> usize {
    let c = algorithms.iter().fold(1, |c, a| c.lcm(&a.chunks()));
    let mut per_link: HashMap<(usize, usize), usize> = HashMap::new();
    for a in algorithms {
        let split = c / a.chunks();
        for s in a.steps.iter().flat_map(|s| &s.sends) {
            *per_link.entry((s.src, s.dst)).or_insert(0) += split;
        }
    }
    per_link.into_values().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(src: usize, dst: usize) -> Send {
        Send { chunk: 0, src, dst }
    }

    #[test]
    fn a_step_needs_its_busiest_links_rounds() {
        let topology = crate::topology::load("ring:4").unwrap();
        let index = topology.index();
        let caps = topology.capacities().unwrap();
        assert_eq!(rounds_needed(&index, &caps, &[]), 1);
        let sends = [send(0, 1), send(0, 1), send(1, 2)];
        let per_link = caps.links[index.link_of[&(0, 1)]];
        let expected = 2u32.div_ceil(per_link).max(1);
        assert_eq!(rounds_needed(&index, &caps, &sends), expected);
        let links = sends.iter().map(|s| index.link_of[&(s.src, s.dst)]);
        assert_eq!(StepRounds::new(&index, &caps).rounds(links), expected);
    }
}
