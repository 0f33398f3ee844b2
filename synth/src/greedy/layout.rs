//! From a greedy [`Schedule`] to [`Algorithm`]s: the schedule as it ran (one round per
//! step, one step per epoch with sends: epochs that only wait for chunks in flight are
//! dropped, the order of the sends stays), and the same sends *levelled*: every send moves to the step after the one that
//! delivered its chunk to its sender (step 0 for a starting holder), so the algorithm has as
//! many steps as the longest relay chain (fewer alphas) and each step takes the rounds its
//! busiest link or switch constraint needs (more rounds).

use super::schedule::{Fabric, Schedule};
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Collective;
use crate::load::StepRounds;
use crate::origin::Family;

/// The algorithm of `family` on the topology named `topology` with the given steps of (chunk index, link) sends, each step
/// taking the rounds its busiest link or switch constraint needs.
pub fn algorithm<'s>(
    fabric: &Fabric,
    coll: &Collective,
    steps: impl IntoIterator<Item = &'s Vec<(u32, u32)>>,
    family: Family,
    topology: &str,
) -> Algorithm {
    let mut counters = StepRounds::over(fabric.governing, fabric.link_cap, fabric.switch_cap);
    let steps: Vec<Step> = steps
        .into_iter()
        .map(|sends| Step {
            rounds: counters.rounds(sends.iter().map(|&(_, l)| l as usize)),
            reduce: false,
            sends: sends
                .iter()
                .map(|&(c, l)| Send {
                    chunk: coll.chunks[c as usize].address,
                    src: fabric.src[l as usize],
                    dst: fabric.dst[l as usize],
                })
                .collect(),
        })
        .collect();
    Algorithm::made(family, topology, coll.clone(), steps)
}

/// The schedule as it ran: one step per epoch with sends (one round each).
pub fn listed(schedule: &Schedule) -> impl Iterator<Item = &Vec<(u32, u32)>> + Clone {
    schedule.steps.iter().filter(|s| !s.is_empty())
}

/// The schedule levelled (see the module docs); within a step the sends keep the order in
/// which the greedy run chose them.
pub fn levelled(fabric: &Fabric, schedule: &Schedule) -> Vec<Vec<(u32, u32)>> {
    // Sends grouped by chunk, in schedule order.
    let total: usize = schedule.steps.iter().map(|s| s.len()).sum();
    let mut by_chunk: Vec<(u32, u32, u32)> = Vec::with_capacity(total); // (chunk, step, pos)
    for (t, sends) in schedule.steps.iter().enumerate() {
        for (i, &(c, _)) in sends.iter().enumerate() {
            by_chunk.push((c, t as u32, i as u32));
        }
    }
    by_chunk.sort_unstable();
    let n = fabric.ranks;
    let mut arrived: Vec<u32> = vec![0; n]; // level + 1 at which the chunk reached a rank
    let mut touched: Vec<usize> = Vec::new();
    let mut level_of: Vec<Vec<u32>> = schedule.steps.iter().map(|s| vec![0; s.len()]).collect();
    let mut levels = 0usize;
    let mut i = 0;
    while i < by_chunk.len() {
        let c = by_chunk[i].0;
        let mut j = i;
        while j < by_chunk.len() && by_chunk[j].0 == c {
            let (_, t, p) = by_chunk[j];
            let l = schedule.steps[t as usize][p as usize].1 as usize;
            let (u, v) = (fabric.src[l], fabric.dst[l]);
            // A sender that did not receive the chunk held it from the start.
            let level = arrived[u];
            level_of[t as usize][p as usize] = level;
            if arrived[v] == 0 {
                arrived[v] = level + 1;
                touched.push(v);
            }
            levels = levels.max(level as usize + 1);
            j += 1;
        }
        for v in touched.drain(..) {
            arrived[v] = 0;
        }
        i = j;
    }
    let mut steps: Vec<Vec<(u32, u32)>> = vec![Vec::new(); levels];
    for (t, sends) in schedule.steps.iter().enumerate() {
        for (p, &send) in sends.iter().enumerate() {
            steps[level_of[t][p] as usize].push(send);
        }
    }
    steps
}
