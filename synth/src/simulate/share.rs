//! Max-min fair bandwidth sharing by progressive filling.
//!
//! Every flow crosses a list of resources (a link, the switch constraints covering it, a
//! rank's local memory); a resource listed twice by one flow is used twice by it. All flows
//! that are not yet limited grow at the same rate until some resource is full; the flows
//! through that resource are frozen at their current rate, and the rest keep growing. The
//! result is the unique max-min fair allocation.

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
pub struct Sharing {
    /// Dense index of each resource in the current call (`usize::MAX`: unused).
    dense: Vec<usize>,
    /// Resources of the current call, by dense index.
    used: Vec<usize>,
    cap: Vec<f64>,
    left: Vec<f64>,
    weight: Vec<f64>,
    full: Vec<bool>,
    paths: Vec<Vec<usize>>,
    frozen: Vec<bool>,
}

impl Sharing {
    /// Buffers for a fabric of `resources` resources.
    pub fn new(resources: usize) -> Sharing {
        Sharing {
            dense: vec![usize::MAX; resources],
            used: Vec::new(),
            cap: Vec::new(),
            left: Vec::new(),
            weight: Vec::new(),
            full: Vec::new(),
            paths: Vec::new(),
            frozen: Vec::new(),
        }
    }

    /// The max-min fair rate of one flow of each group into `rates`: group `i` is
    /// `groups[i].1` flows (a positive count) that each cross the resources `groups[i].0`.
    /// Flows of one group always get equal rates, so this equals [`max_min_rates`] on the
    /// flows listed one by one.
    pub fn rates(&mut self, caps: &[f64], groups: &[(&[usize], f64)], rates: &mut Vec<f64>) {
        // Work on the resources some group uses only, renumbered densely.
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
        let paths = &self.paths[..groups.len()];
        rates.clear();
        rates.resize(groups.len(), 0.0);
        self.frozen.clear();
        self.frozen.extend(paths.iter().map(|f| f.is_empty()));
        for (i, f) in paths.iter().enumerate() {
            if f.is_empty() {
                rates[i] = f64::INFINITY;
            }
        }
        self.left.clear();
        self.left.extend_from_slice(&self.cap);
        // Weight of the unfrozen flows on each resource.
        self.weight.clear();
        self.weight.resize(self.cap.len(), 0.0);
        for (i, f) in paths.iter().enumerate() {
            if !self.frozen[i] {
                for &j in f {
                    self.weight[j] += groups[i].1;
                }
            }
        }
        let mut active = self.frozen.iter().filter(|&&f| !f).count();
        while active > 0 {
            let mut step = f64::INFINITY;
            for (j, &w) in self.weight.iter().enumerate() {
                if w > 0.0 {
                    step = step.min(self.left[j].max(0.0) / w);
                }
            }
            if !step.is_finite() {
                break;
            }
            for (j, &w) in self.weight.iter().enumerate() {
                self.left[j] -= step * w;
            }
            // Freeze every flow through a resource that is now full.
            self.full.clear();
            let (weight, left, cap) = (&self.weight, &self.left, &self.cap);
            self.full
                .extend((0..cap.len()).map(|j| weight[j] > 0.0 && left[j] <= cap[j] * 1e-12));
            let mut any = false;
            for (i, f) in paths.iter().enumerate() {
                if self.frozen[i] {
                    continue;
                }
                rates[i] += step;
                if f.iter().any(|&j| self.full[j]) {
                    self.frozen[i] = true;
                    any = true;
                    active -= 1;
                    for &j in f {
                        self.weight[j] -= groups[i].1;
                    }
                }
            }
            if !any {
                // Numerical safety: nothing froze although a resource bounded the step.
                break;
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
}
