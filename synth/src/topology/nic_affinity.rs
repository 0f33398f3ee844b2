//! Which NICs serve which GPUs, from each GPU's nearest NICs (an NCCL topology dump's PCI
//! tree, or the PIX/PXB/PHB/NODE/SYS cells of `nvidia-smi topo -m`), as [`NicFacts`]:
//! every GPU with its own `k` NICs, or every block of `b` consecutive GPUs sharing one.

use super::multinode::{NicFacts, NicPlacement};
use std::collections::{BTreeMap, BTreeSet};

/// The NIC facts of a node with the NICs each serves.
#[derive(Debug, Clone, PartialEq)]
pub struct Affinity {
    /// The facts multi-node composition uses.
    pub facts: NicFacts,
    /// Each used NIC by name with the ranks it serves.
    pub serves: Vec<(String, Vec<usize>)>,
    /// NICs left out, one line each.
    pub notes: Vec<String>,
}

/// The affinity of GPUs whose nearest NICs are `nearest[g]` (indices into `nics`, each a
/// name and GB/s), with NIC latency `alpha`. Irregular sharing, or NICs of different speeds
/// among those used, is an error naming them.
pub fn affinity(
    nearest: &[BTreeSet<usize>],
    nics: &[(String, f64)],
    alpha: f64,
) -> Result<Affinity, String> {
    let n = nearest.len();
    let served: Vec<Vec<usize>> = (0..nics.len())
        .map(|j| (0..n).filter(|&g| nearest[g].contains(&j)).collect())
        .collect();
    let mut notes = Vec::new();
    for (j, (name, bw)) in nics.iter().enumerate() {
        if served[j].is_empty() {
            notes.push(format!(
                "NIC {name} ({bw} GB/s) is nearest no GPU: not used"
            ));
        }
    }
    let used: Vec<usize> = (0..nics.len()).filter(|&j| !served[j].is_empty()).collect();
    let Some(&first) = used.first() else {
        return Err("no NIC is near any GPU".to_string());
    };
    let speed = nics[first].1;
    if let Some(&j) = used.iter().find(|&&j| nics[j].1 != speed) {
        return Err(format!(
            "the NICs nearest the GPUs differ in speed ({} {} GB/s, {} {} GB/s); synth models one NIC speed per node: write [nic] by hand",
            nics[first].0, speed, nics[j].0, nics[j].1
        ));
    }
    let mut groups: BTreeMap<Vec<usize>, Vec<usize>> = BTreeMap::new();
    for &j in &used {
        groups.entry(served[j].clone()).or_default().push(j);
    }
    let irregular = |why: String| {
        format!(
            "NIC affinity is irregular ({why}); synth models k NICs per GPU or one NIC per block of consecutive GPUs: write [nic] by hand"
        )
    };
    let mut covered = vec![0usize; n];
    for gpus in groups.keys() {
        for &g in gpus {
            covered[g] += 1;
        }
    }
    if let Some(g) = covered.iter().position(|&c| c != 1) {
        return Err(irregular(format!(
            "GPU {g} is equally near NICs that serve different GPUs"
        )));
    }
    let mut placement: Option<NicPlacement> = None;
    let mut serves = Vec::new();
    for (gpus, group) in &groups {
        let (gc, nc) = (gpus.len(), group.len());
        let this = if nc.is_multiple_of(gc) {
            let k = nc / gc;
            for (i, &g) in gpus.iter().enumerate() {
                for &j in &group[i * k..(i + 1) * k] {
                    serves.push((nics[j].0.clone(), vec![g]));
                }
            }
            NicPlacement::PerGpu(k)
        } else if gc.is_multiple_of(nc) {
            let b = gc / nc;
            for (i, &j) in group.iter().enumerate() {
                let block = gpus[i * b..(i + 1) * b].to_vec();
                if !block[0].is_multiple_of(b) || block.windows(2).any(|w| w[1] != w[0] + 1) {
                    return Err(irregular(format!(
                        "NIC {} would serve GPUs {block:?}, not a block of {b} consecutive GPUs",
                        nics[j].0
                    )));
                }
                serves.push((nics[j].0.clone(), block));
            }
            if !n.is_multiple_of(b) {
                return Err(irregular(format!("blocks of {b} GPUs among {n}")));
            }
            NicPlacement::PerNode(n / b)
        } else {
            return Err(irregular(format!("{nc} NICs for {gc} GPUs")));
        };
        match placement {
            None => placement = Some(this),
            Some(p) if p == this => {}
            Some(_) => {
                return Err(irregular(
                    "GPU groups with different NIC counts".to_string(),
                ))
            }
        }
    }
    serves.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(Affinity {
        facts: NicFacts {
            bandwidth: speed,
            alpha,
            placement: placement.expect("at least one NIC is used"),
        },
        serves,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[usize]) -> BTreeSet<usize> {
        v.iter().copied().collect()
    }

    #[test]
    fn per_gpu_per_block_and_irregular() {
        let nics: Vec<(String, f64)> = (0..4).map(|j| (format!("mlx5_{j}"), 25.0)).collect();
        // Two GPUs and two NICs behind each switch: one NIC each.
        let near = vec![set(&[0, 1]), set(&[0, 1]), set(&[2, 3]), set(&[2, 3])];
        let a = affinity(&near, &nics, 2.6).unwrap();
        assert_eq!(a.facts.placement, NicPlacement::PerGpu(1));
        // Eight GPUs, four NICs behind one switch: blocks of two.
        let near = vec![set(&[0, 1, 2, 3]); 8];
        let a = affinity(&near, &nics, 2.6).unwrap();
        assert_eq!(a.facts.placement, NicPlacement::PerNode(4));
        assert_eq!(a.serves[1], ("mlx5_1".to_string(), vec![2, 3]));
        // GPU 1 between two groups.
        let near = vec![set(&[0]), set(&[0, 1]), set(&[1])];
        let e = affinity(&near, &nics, 2.6).unwrap_err();
        assert!(e.contains("irregular"), "{e}");
        // Different speeds.
        let mut slow = nics.clone();
        slow[1].1 = 12.5;
        let near = vec![set(&[0]), set(&[1])];
        assert!(affinity(&near, &slow, 2.6).unwrap_err().contains("speed"));
    }
}
