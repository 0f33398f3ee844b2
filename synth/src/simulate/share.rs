//! Max-min fair bandwidth sharing by progressive filling.
//!
//! Every flow crosses a list of resources (a link, the switch constraints covering it, a
//! rank's local memory); a resource listed twice by one flow is used twice by it. All flows
//! that are not yet limited grow at the same rate until some resource is full; the flows
//! through that resource are frozen at their current rate, and the rest keep growing. The
//! result is the unique max-min fair allocation.

use super::queue::IndexedHeap;

/// The max-min fair rate of every flow. `caps[j]` is the capacity of resource `j` (any
/// rate unit, positive); `flows[i]` lists the resources flow `i` crosses (repeats count as
/// extra use). A flow that crosses no resource gets an infinite rate.
pub fn max_min_rates(caps: &[f64], flows: &[Vec<usize>]) -> Vec<f64> {
    let paths: Vec<&[usize]> = flows.iter().map(Vec::as_slice).collect();
    max_min_rates_of(caps, &paths)
}

/// [`max_min_rates`] on borrowed paths.
pub fn max_min_rates_of(caps: &[f64], flows: &[&[usize]]) -> Vec<f64> {
    let groups: Vec<(&[usize], f64)> = flows.iter().map(|f| (*f, 1.0)).collect();
    let mut rates = Vec::new();
    Sharing::new(caps.len()).rates(caps, &groups, &mut rates);
    rates
}

/// Progressive filling over groups of identical flows, with buffers kept between calls so
/// that a call costs what its groups and their resources cost, not the whole fabric: the
/// simulator calls it at every event for the flows that share resources with a change.
///
/// The filling is event driven: every unfrozen flow has the current fill level as its rate,
/// so a resource fills at level (capacity − frozen use) / (unfrozen weight). The resources
/// wait in a heap keyed by that level; the first to fill freezes its flows at the level and
/// moves the keys of the resources those flows cross. A call costs O(path lengths × log
/// resources), however many distinct levels the allocation has.
pub struct Sharing {
    /// Dense index of each resource in the current call (`usize::MAX`: unused).
    dense: Vec<usize>,
    /// Resources of the current call, by dense index.
    used: Vec<usize>,
    cap: Vec<f64>,
    /// Bandwidth taken by frozen flows, per resource.
    taken: Vec<f64>,
    /// Flows not yet frozen on each resource (a flow crossing it twice counts twice).
    weight: Vec<f64>,
    /// Unfrozen groups' crossings of each resource.
    open: Vec<usize>,
    paths: Vec<Vec<usize>>,
    /// The groups crossing each resource: `crossing[first[j]..first[j + 1]]`.
    first: Vec<usize>,
    crossing: Vec<usize>,
    /// Where the next crossing of each resource goes while `crossing` is filled.
    cursor: Vec<usize>,
    frozen: Vec<bool>,
    /// Fill level of each resource with unfrozen flows.
    levels: IndexedHeap,
}

impl Sharing {
    /// Buffers for a fabric of `resources` resources.
    pub fn new(resources: usize) -> Sharing {
        Sharing {
            dense: vec![usize::MAX; resources],
            used: Vec::new(),
            cap: Vec::new(),
            taken: Vec::new(),
            weight: Vec::new(),
            open: Vec::new(),
            paths: Vec::new(),
            first: Vec::new(),
            crossing: Vec::new(),
            cursor: Vec::new(),
            frozen: Vec::new(),
            levels: IndexedHeap::new(resources),
        }
    }

    /// The max-min fair rate of one flow of each group into `rates`: group `i` is
    /// `groups[i].1` flows (a positive count) that each cross the resources `groups[i].0`.
    /// Flows of one group always get equal rates, so this equals [`max_min_rates`] on the
    /// flows listed one by one.
    pub fn rates(&mut self, caps: &[f64], groups: &[(&[usize], f64)], rates: &mut Vec<f64>) {
        self.densify(caps, groups);
        self.index_crossings(groups);
        rates.clear();
        rates.resize(groups.len(), f64::INFINITY);
        self.fill(groups, rates);
    }

    /// Renumbers the resources some group uses densely: their capacities into `cap`, each
    /// group's path into `paths`.
    fn densify(&mut self, caps: &[f64], groups: &[(&[usize], f64)]) {
        self.cap.clear();
        self.paths.resize_with(groups.len(), Vec::new);
        for ((path, _), dense_path) in groups.iter().zip(&mut self.paths) {
            dense_path.clear();
            for &j in path.iter() {
                if self.dense[j] == usize::MAX {
                    self.dense[j] = self.cap.len();
                    self.used.push(j);
                    self.cap.push(caps[j]);
                }
                dense_path.push(self.dense[j]);
            }
        }
        for j in self.used.drain(..) {
            self.dense[j] = usize::MAX;
        }
    }

    /// Who crosses what, the unfrozen weight of each resource, and its first fill level.
    fn index_crossings(&mut self, groups: &[(&[usize], f64)]) {
        let paths = &self.paths[..groups.len()];
        let resources = self.cap.len();
        self.frozen.clear();
        self.frozen.extend(paths.iter().map(|f| f.is_empty()));
        self.weight.clear();
        self.weight.resize(resources, 0.0);
        self.open.clear();
        self.open.resize(resources, 0);
        self.first.clear();
        self.first.resize(resources + 1, 0);
        for (f, &(_, count)) in paths.iter().zip(groups) {
            for &j in f {
                self.weight[j] += count;
                self.open[j] += 1;
                self.first[j + 1] += 1;
            }
        }
        for j in 0..resources {
            self.first[j + 1] += self.first[j];
        }
        self.crossing.clear();
        self.crossing.resize(self.first[resources], 0);
        self.cursor.clear();
        self.cursor.extend_from_slice(&self.first[..resources]);
        for (i, f) in paths.iter().enumerate() {
            for &j in f {
                self.crossing[self.cursor[j]] = i;
                self.cursor[j] += 1;
            }
        }
        self.taken.clear();
        self.taken.resize(resources, 0.0);
        for j in 0..resources {
            if self.open[j] > 0 {
                self.levels.set(j, self.cap[j] / self.weight[j]);
            }
        }
    }

    /// Progressive filling: the first resource to fill freezes its unfrozen groups at the
    /// level (their `rates`) and moves the levels of the resources they cross.
    fn fill(&mut self, groups: &[(&[usize], f64)], rates: &mut [f64]) {
        let paths = &self.paths[..groups.len()];
        let mut level = 0.0f64;
        while let Some((j, fill)) = self.levels.peek() {
            self.levels.remove(j);
            level = level.max(fill);
            for k in self.first[j]..self.first[j + 1] {
                let i = self.crossing[k];
                if self.frozen[i] {
                    continue;
                }
                self.frozen[i] = true;
                rates[i] = level;
                let count = groups[i].1;
                for &m in &paths[i] {
                    self.weight[m] -= count;
                    self.taken[m] += count * level;
                    self.open[m] -= 1;
                }
                for &m in &paths[i] {
                    if self.open[m] == 0 {
                        self.levels.remove(m);
                    } else {
                        let fill = (self.cap[m] - self.taken[m]).max(0.0) / self.weight[m];
                        self.levels.set(m, fill.max(level));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_a_bottleneck_and_redistributes() {
        // Flows 0 and 1 share resource 0 (cap 10); flow 1 also crosses resource 1 (cap 2).
        let r = max_min_rates(&[10.0, 2.0], &[vec![0], vec![0, 1]]);
        assert!((r[1] - 2.0).abs() < 1e-9);
        assert!((r[0] - 8.0).abs() < 1e-9);
    }

    #[test]
    fn repeated_resource_counts_twice() {
        let r = max_min_rates(&[10.0], &[vec![0, 0]]);
        assert!((r[0] - 5.0).abs() < 1e-9);
    }

    #[test]
    fn a_group_of_flows_shares_like_the_flows_listed_one_by_one() {
        // Three flows over resources 0 and 1, two over resource 1 alone (caps 9 and 10).
        let caps = [9.0, 10.0];
        let one_by_one = max_min_rates(
            &caps,
            &[vec![0, 1], vec![0, 1], vec![0, 1], vec![1], vec![1]],
        );
        let mut grouped = Vec::new();
        let mut sharing = Sharing::new(caps.len());
        sharing.rates(&caps, &[(&[0, 1], 3.0), (&[1], 2.0)], &mut grouped);
        assert!((grouped[0] - one_by_one[0]).abs() < 1e-12, "{grouped:?}");
        assert!((grouped[1] - one_by_one[3]).abs() < 1e-12, "{grouped:?}");
        assert!((grouped[0] * 3.0 + grouped[1] * 2.0 - 10.0).abs() < 1e-9);
        // The buffers are clean for the next call.
        sharing.rates(&caps, &[(&[0], 1.0)], &mut grouped);
        assert_eq!(grouped, vec![9.0]);
    }

    /// Progressive filling done the slow, obvious way: every flow unfrozen grows by the
    /// smallest step that fills a resource, then the flows through full resources freeze.
    fn reference(caps: &[f64], flows: &[Vec<usize>]) -> Vec<f64> {
        let mut rate: Vec<f64> = flows
            .iter()
            .map(|f| if f.is_empty() { f64::INFINITY } else { 0.0 })
            .collect();
        let mut frozen: Vec<bool> = flows.iter().map(Vec::is_empty).collect();
        let mut left = caps.to_vec();
        while frozen.iter().any(|f| !f) {
            let mut weight = vec![0.0; caps.len()];
            for (f, _) in flows.iter().zip(&frozen).filter(|(_, z)| !**z) {
                for &j in f {
                    weight[j] += 1.0;
                }
            }
            let step = (0..caps.len())
                .filter(|&j| weight[j] > 0.0)
                .map(|j| left[j] / weight[j])
                .fold(f64::INFINITY, f64::min);
            for j in 0..caps.len() {
                left[j] -= step * weight[j];
            }
            for (i, f) in flows.iter().enumerate() {
                if !frozen[i] {
                    rate[i] += step;
                    if f.iter()
                        .any(|&j| weight[j] > 0.0 && left[j] <= caps[j] * 1e-9)
                    {
                        frozen[i] = true;
                    }
                }
            }
        }
        rate
    }

    proptest::proptest! {
        #[test]
        fn event_driven_filling_equals_the_obvious_one(
            caps in proptest::collection::vec(1u32..50, 1..8),
            raw in proptest::collection::vec(proptest::collection::vec(0usize..8, 0..5), 1..12),
        ) {
            let caps: Vec<f64> = caps.into_iter().map(f64::from).collect();
            let flows: Vec<Vec<usize>> = raw
                .into_iter()
                .map(|f| f.into_iter().map(|j| j % caps.len()).collect())
                .collect();
            let fast = max_min_rates(&caps, &flows);
            let slow = reference(&caps, &flows);
            for (a, b) in fast.iter().zip(&slow) {
                proptest::prop_assert!(
                    a == b || (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                    "{fast:?} against {slow:?}"
                );
            }
        }
    }
}
