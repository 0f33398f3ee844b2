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
    // Work on the resources some flow uses only, renumbered densely.
    let mut dense = vec![usize::MAX; caps.len()];
    let mut cap: Vec<f64> = Vec::new();
    let paths: Vec<Vec<usize>> = flows
        .iter()
        .map(|f| {
            f.iter()
                .map(|&j| {
                    if dense[j] == usize::MAX {
                        dense[j] = cap.len();
                        cap.push(caps[j]);
                    }
                    dense[j]
                })
                .collect()
        })
        .collect();
    let mut rate = vec![0.0; flows.len()];
    let mut frozen: Vec<bool> = paths.iter().map(|f| f.is_empty()).collect();
    for (i, f) in paths.iter().enumerate() {
        if f.is_empty() {
            rate[i] = f64::INFINITY;
        }
    }
    let mut left = cap.clone();
    // Weight of the unfrozen flows on each resource.
    let mut weight = vec![0.0f64; cap.len()];
    for (i, f) in paths.iter().enumerate() {
        if !frozen[i] {
            for &j in f {
                weight[j] += 1.0;
            }
        }
    }
    let mut active = frozen.iter().filter(|&&f| !f).count();
    while active > 0 {
        let mut step = f64::INFINITY;
        for (j, &w) in weight.iter().enumerate() {
            if w > 0.0 {
                step = step.min(left[j].max(0.0) / w);
            }
        }
        if !step.is_finite() {
            break;
        }
        for (j, &w) in weight.iter().enumerate() {
            left[j] -= step * w;
        }
        // Freeze every flow through a resource that is now full.
        let full: Vec<bool> = (0..cap.len())
            .map(|j| weight[j] > 0.0 && left[j] <= cap[j] * 1e-12)
            .collect();
        let mut any = false;
        for (i, f) in paths.iter().enumerate() {
            if frozen[i] {
                continue;
            }
            rate[i] += step;
            if f.iter().any(|&j| full[j]) {
                frozen[i] = true;
                any = true;
                active -= 1;
                for &j in f {
                    weight[j] -= 1.0;
                }
            }
        }
        if !any {
            // Numerical safety: nothing froze although a resource bounded the step.
            break;
        }
    }
    rate
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
}
