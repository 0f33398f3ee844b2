//! Step groups: runs of consecutive steps that the lowering gives channels of their own, so
//! that a threadblock holds one pipeline stage and the runtime overlaps the stages of
//! consecutive slices ([`Algorithm::step_groups`]).

use crate::algorithm::Algorithm;
use crate::topology::{Topology, TopologyIndex};

/// Threadblocks per rank that [`step_groups`] may lead the lowering to: all threadblocks
/// of a program spin on each other's flags, so they must be resident at once (msccl-ir.md
/// §1.9); 104 is the smallest compute-unit count among the fabrics' GPUs (an MI250 GCD; an
/// A100 has 108 SMs, an H100 132).
pub const RESIDENT_THREADBLOCKS: usize = 104;

/// How much slower than its busiest resource a run of consecutive steps may be when the
/// runtime takes each slice through them in turn before they share a channel group: the
/// run's summed per-step bottlenecks may exceed the bottleneck of its summed loads by this
/// fraction.
pub(crate) const BALANCE_SLACK: f64 = 0.05;

/// Channel groups for the steps of `algorithm` on `topology` ([`Algorithm::step_groups`]):
/// consecutive steps share a group while their loads stay balanced (within
/// [`BALANCE_SLACK`]), as a ring's steps are, since the runtime's slice-by-slice replay of
/// one group then keeps every link busy and has no pipeline to fill; an unbalanced step
/// (a tree's relays after its roots' sends) starts a new group, so that a threadblock holds
/// one stage of the pipeline and the runtime overlaps the stages of consecutive slices.
/// Groups are then merged as [`fit_groups`] needs; `None` when one group remains.
pub fn step_groups(
    topology: &Topology,
    index: &TopologyIndex,
    algorithm: &Algorithm,
) -> Option<Vec<usize>> {
    let links = topology.links.len();
    let bandwidth = |r: usize| {
        if r < links {
            topology.links[r].bandwidth
        } else {
            topology.switches[r - links].bandwidth
        }
    };
    let mut wanted = Vec::with_capacity(algorithm.steps.len());
    let mut group = 0;
    // The current run's summed loads (per unit of bandwidth), their peak, and the sum of its
    // steps' own peaks.
    let mut pooled: std::collections::HashMap<usize, f64> = std::collections::HashMap::new();
    let (mut pooled_peak, mut stepwise) = (0.0f64, 0.0f64);
    for step in &algorithm.steps {
        let mut load: std::collections::HashMap<usize, f64> = std::collections::HashMap::new();
        for s in &step.sends {
            let Some(&l) = index.link_of.get(&(s.src, s.dst)) else {
                continue;
            };
            for r in std::iter::once(l).chain(index.governing[l].iter().map(|&j| links + j)) {
                *load.entry(r).or_insert(0.0) += 1.0 / bandwidth(r);
            }
        }
        let peak = load.values().copied().fold(0.0, f64::max);
        let joined = load
            .iter()
            .map(|(r, x)| pooled.get(r).copied().unwrap_or(0.0) + x)
            .fold(pooled_peak, f64::max);
        if !wanted.is_empty() && stepwise + peak > (1.0 + BALANCE_SLACK) * joined {
            group += 1;
            pooled.clear();
            pooled_peak = peak;
            stepwise = 0.0;
        } else {
            pooled_peak = joined;
        }
        for (r, x) in load {
            *pooled.entry(r).or_insert(0.0) += x;
        }
        stepwise += peak;
        wanted.push(group);
    }
    fit_groups(algorithm, wanted)
}

/// `algorithm` with the channel groups `groups` (see [`step_groups`]), its origin's stages
/// set (named `-g<groups>`) so that it and its one-group twin can be told apart.
pub fn with_groups(mut algorithm: Algorithm, groups: Option<Vec<usize>>) -> Algorithm {
    if let Some(g) = &groups {
        algorithm.origin.stages = Some(g.iter().max().map_or(1, |x| x + 1));
        algorithm = algorithm.renamed();
    }
    algorithm.step_groups = groups;
    algorithm
}

/// `algorithm` in one channel group, as the runtime's replay then takes every slice through
/// all its steps in turn (the `-g<groups>` mark of [`with_groups`] removed).
pub fn ungrouped(algorithm: &Algorithm) -> Algorithm {
    let mut plain = algorithm.clone();
    if plain.step_groups.take().is_some() && plain.origin.stages.take().is_some() {
        plain = plain.renamed();
    }
    plain
}

/// `wanted` (a channel group per step of `algorithm`, in increasing order) merged into as
/// few consecutive groups as needed for the lowering to keep every rank within
/// [`RESIDENT_THREADBLOCKS`] (one threadblock per peer, direction and channel, plus one for
/// local copies) and the runtime's channels; `None` when only one group fits.
pub fn fit_groups(algorithm: &Algorithm, wanted: Vec<usize>) -> Option<Vec<usize>> {
    let per_group = algorithm.piece_channels.unwrap_or(1).max(1);
    let count = wanted.iter().max().map_or(1, |g| g + 1);
    // Per (rank, peer, direction): the wanted groups with a transfer on it, ascending.
    let mut used: std::collections::HashMap<(usize, usize, bool), Vec<usize>> =
        std::collections::HashMap::new();
    for (step, &group) in algorithm.steps.iter().zip(&wanted) {
        for s in &step.sends {
            for key in [(s.src, s.dst, true), (s.dst, s.src, false)] {
                let list = used.entry(key).or_default();
                if list.last() != Some(&group) {
                    list.push(group);
                }
            }
        }
    }
    let merged = |g: usize, most: usize| g * most / count;
    let fits = |most: usize| {
        let mut per_rank = vec![0usize; algorithm.collective.ranks];
        for (&(rank, _, _), list) in &used {
            let mut distinct = 0;
            let mut last = None;
            for &g in list {
                if last != Some(merged(g, most)) {
                    distinct += 1;
                    last = Some(merged(g, most));
                }
            }
            per_rank[rank] += distinct * per_group;
        }
        per_rank.into_iter().max().unwrap_or(0) < RESIDENT_THREADBLOCKS
    };
    let most = count.min(runtime::limits::Limits::PORTABLE.max_channels / per_group);
    (2..=most)
        .rev()
        .find(|&m| fits(m))
        .map(|m| wanted.iter().map(|&g| merged(g, m)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Send, Step};
    use crate::collective::{Collective, Kind};
    use crate::topology::load;

    #[test]
    fn balanced_steps_share_a_group_and_tree_stages_do_not() {
        // A ring's steps load every link alike: one group.
        let topo = load("ring:6").unwrap();
        let index = topo.index();
        let ring =
            crate::constructions::rings::ring_algorithm(&topo, &index, Kind::AllGather, 0, 1)
                .unwrap()
                .unwrap();
        assert_eq!(step_groups(&topo, &index, &ring), None);
        // dgx-a100x2's trees send over the NICs, then relay over NVSwitch: two stages.
        let topo = load("dgx-a100x2").unwrap();
        let index = topo.index();
        let coll = Collective::new(Kind::AllGather, topo.ranks, 0, 1).unwrap();
        let limits = crate::engine::Limits {
            max_steps: 16,
            max_chunks: 8,
            max_chunks_given: false,
            deadline: std::time::Instant::now() + std::time::Duration::from_secs(3600),
            extra_memory: None,
            work_limit: None,
        };
        let progress = crate::progress::Progress::hidden();
        let r = crate::trees::synthesize_trees(
            &topo,
            &index,
            &coll,
            &limits,
            &progress,
            crate::trees::Depth::Both,
            1,
        )
        .unwrap();
        assert_eq!(r.algorithm.step_groups, Some(vec![0, 1]));
        assert!(r.algorithm.name.ends_with("-g2"), "{}", r.algorithm.name);
        assert_eq!(ungrouped(&r.algorithm).step_groups, None);
        assert!(!ungrouped(&r.algorithm).name.ends_with("-g2"));
    }

    #[test]
    fn groups_keep_threadblocks_resident() {
        // Every rank of a 32-rank fabric talks to all 31 others in both of two steps: one
        // group holds 62 threadblocks per rank, two would hold 124.
        let topo = load("dgx-a100x4").unwrap();
        let n = topo.ranks;
        let all: Vec<Send> = (0..n)
            .flat_map(|s| {
                (0..n).filter(move |&d| d != s).map(move |d| Send {
                    chunk: s,
                    src: s,
                    dst: d,
                })
            })
            .collect();
        let step = Step {
            rounds: 1,
            reduce: false,
            sends: all,
        };
        let a = Algorithm {
            name: "allgather-dgx-a100x4".into(),
            origin: Default::default(),
            topology: topo.name.clone(),
            collective: Collective::new(Kind::AllGather, n, 0, 1).unwrap(),
            steps: vec![step.clone(), step],
            piece_channels: None,
            step_groups: None,
            message_chunks: None,
            serial_links: false,
            rank_order: None,
        };
        assert_eq!(fit_groups(&a, vec![0, 1]), None);
        // With the second step inside each 8-GPU node, 62 + 14 threadblocks fit.
        let mut within = a.clone();
        within.steps[1].sends.retain(|s| s.src / 8 == s.dst / 8);
        assert_eq!(fit_groups(&within, vec![0, 1]), Some(vec![0, 1]));
    }
}
