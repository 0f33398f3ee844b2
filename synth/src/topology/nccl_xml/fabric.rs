//! An NCCL topology dump's [`Machine`] as a fabric: NVLink (direct and through NVSwitches,
//! per link by GPU generation), PCIe between GPUs no NVLink joins (links of the narrowest
//! PCIe hop on their path, constraints per shared hop and between CPUs) and the NICs nearest
//! each GPU as [`NicFacts`].

use super::{Machine, NvTarget, Place, XmlError};
use crate::topology::model::{Link, SwitchConstraint, Topology};
use crate::topology::multinode::{NicFacts, DEFAULT_NIC_ALPHA};
use crate::topology::nic_affinity;
use std::collections::{BTreeMap, BTreeSet};

/// Latency of an NVLink (µs), as the built-ins.
pub const NVLINK_ALPHA: f64 = 0.7;
/// Latency of a PCIe transfer between GPUs (µs), until `synth topo fit` measures it.
pub const PCIE_ALPHA: f64 = 1.0;
/// PCIe rate assumed where a path gives no speed at all (NCCL's `PCI_BW`, Gen3 x16).
pub const DEFAULT_PCIE: f64 = 12.0;

/// Nominal GB/s per direction of one NVLink of a GPU with compute capability `sm` x 10:
/// NVLink1 (P100) 20, NVLink2/3/4 (V100, A100, H100/H200) 25, the A40/RTX 30 bridge 14.0625,
/// NVLink5 (B200) 50. `None` for generations without NVLink.
pub fn nvlink_bandwidth(sm: u32) -> Option<f64> {
    match sm {
        60..=69 => Some(20.0),
        70..=79 | 80..=85 | 90..=99 => Some(25.0),
        86 | 88 => Some(14.0625),
        100..=119 => Some(50.0),
        _ => None,
    }
}

/// GB/s between two CPU sockets (NCCL's figures: Intel by generation, AMD, POWER9, Arm).
fn inter_cpu_bandwidth(cpu: &super::Cpu) -> f64 {
    match (cpu.arch.as_str(), cpu.vendor.as_str()) {
        ("x86_64", "GenuineIntel") => match cpu.model {
            207.. => 40.0,
            143.. => 22.0,
            85.. => 10.0,
            _ => 6.0,
        },
        ("x86_64", "AuthenticAMD") => 16.0,
        ("ppc64", _) => 32.0,
        _ => 6.0,
    }
}

/// Settings of the conversion.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// GB/s of one NVLink, overriding the generation's figure.
    pub nvlink_bandwidth: Option<f64>,
    /// NVLink latency in µs.
    pub nvlink_alpha: f64,
    /// PCIe latency in µs.
    pub pcie_alpha: f64,
    /// NIC latency in µs.
    pub nic_alpha: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nvlink_bandwidth: None,
            nvlink_alpha: NVLINK_ALPHA,
            pcie_alpha: PCIE_ALPHA,
            nic_alpha: DEFAULT_NIC_ALPHA,
        }
    }
}

/// The NVSwitch part of a node: its members and each member's port bandwidth (its NVLinks to
/// switches times the per-link rate).
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchPart {
    /// Member ranks, ascending.
    pub members: Vec<usize>,
    /// GB/s of each member's port, in `members` order.
    pub ports: Vec<f64>,
}

impl SwitchPart {
    /// The one port bandwidth every member has, if they agree.
    pub fn uniform_port(&self) -> Option<f64> {
        let first = *self.ports.first()?;
        self.ports.iter().all(|&p| p == first).then_some(first)
    }
}

/// A node fabric by link class, as read from a dump: what [`Parts::topology`] builds and
/// what `synth topo import` writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts {
    /// Ranks (GPUs, by CUDA device index).
    pub ranks: usize,
    /// Compute capability x 10 of each rank.
    pub sm: Vec<u32>,
    /// The NVSwitch, if GPUs have NVLinks to switches.
    pub nvswitch: Option<SwitchPart>,
    /// Direct NVLink counts between GPUs (row = sender).
    pub nvlinks: Vec<Vec<u32>>,
    /// GB/s of one direct NVLink.
    pub nvlink_bandwidth: f64,
    /// NVLink latency in µs.
    pub nvlink_alpha: f64,
    /// PCIe links between GPUs no NVLink joins.
    pub pcie_links: Vec<Link>,
    /// PCIe and inter-CPU constraints over those links.
    pub pcie_switches: Vec<SwitchConstraint>,
    /// The NICs nearest the GPUs.
    pub nic: Option<NicFacts>,
    /// Why the NICs the file lists give no NIC facts (irregular affinity, mixed speeds).
    pub nic_problem: Option<String>,
    /// The NICs used, by name, with the GPUs each serves.
    pub nic_names: Vec<(String, Vec<usize>)>,
    /// What the conversion assumed or left out, one line each.
    pub notes: Vec<String>,
}

/// Converts a machine into fabric parts.
pub fn parts(m: &Machine, opts: &Options) -> Result<Parts, XmlError> {
    let n = m.gpus.len();
    let mut notes = Vec::new();
    let per_link: Vec<Option<f64>> = m
        .gpus
        .iter()
        .map(|g| opts.nvlink_bandwidth.or_else(|| nvlink_bandwidth(g.sm)))
        .collect();
    let by_bus: BTreeMap<_, usize> = m
        .gpus
        .iter()
        .enumerate()
        .filter_map(|(i, g)| g.busid.map(|b| (b, i)))
        .collect();
    let mut counts = vec![vec![0u32; n]; n];
    let mut switch_links = vec![0u32; n];
    let mut lines = vec![vec![0u32; n]; n];
    for (i, g) in m.gpus.iter().enumerate() {
        for l in &g.nvlinks {
            if per_link[i].is_none() {
                return Err(XmlError::Element {
                    line: l.line,
                    element: "nvlink".to_string(),
                    reason: format!(
                        "GPU {} has sm={}, a generation whose NVLink rate synth does not know (give it with --nvlink-bandwidth)",
                        g.dev, g.sm
                    ),
                });
            }
            match l.target {
                NvTarget::Switch => switch_links[i] += l.count,
                NvTarget::Cpu => {}
                NvTarget::Gpu(b) => match by_bus.get(&b) {
                    Some(&j) => {
                        counts[i][j] += l.count;
                        lines[i][j] = l.line;
                    }
                    None => notes.push(format!(
                        "line {}: GPU {}'s NVLinks to {b} lead to no GPU of the file (not visible to NCCL): left out",
                        l.line, g.dev
                    )),
                },
            }
        }
    }
    for i in 0..n {
        for j in 0..n {
            if counts[i][j] != counts[j][i] {
                let line = lines[i][j].max(lines[j][i]);
                return Err(XmlError::Element {
                    line,
                    element: "nvlink".to_string(),
                    reason: format!(
                        "GPU {} lists {} NVLinks to GPU {} but GPU {} lists {} back",
                        m.gpus[i].dev, counts[i][j], m.gpus[j].dev, m.gpus[j].dev, counts[j][i]
                    ),
                });
            }
        }
    }
    let nvswitch = switch_part(&switch_links, &per_link);
    if let Some(sw) = &nvswitch {
        for (&g, &port) in sw.members.iter().zip(&sw.ports) {
            crate::topology::check_bandwidth(port).map_err(|e| {
                XmlError::Machine(format!("GPU {}'s NVSwitch port: {e}", m.gpus[g].dev))
            })?;
        }
    }
    if let Some((i, j)) = (0..n)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .find(|&(i, j)| {
            crate::topology::check_bandwidth(counts[i][j] as f64 * per_link[i].unwrap_or(0.0))
                .is_err()
                && counts[i][j] > 0
        })
    {
        return Err(XmlError::Machine(format!(
            "GPUs {} and {}: {} NVLinks are past any real machine",
            m.gpus[i].dev, m.gpus[j].dev, counts[i][j]
        )));
    }
    let pair_rate = |i: usize, j: usize| per_link[i].unwrap_or(0.0).min(per_link[j].unwrap_or(0.0));
    let nvlink_bandwidth = (0..n)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .find(|&(i, j)| counts[i][j] > 0)
        .map_or(
            per_link.iter().flatten().copied().next().unwrap_or(25.0),
            |(i, j)| pair_rate(i, j),
        );
    if (0..n).any(|i| (0..n).any(|j| counts[i][j] > 0 && pair_rate(i, j) != nvlink_bandwidth)) {
        return Err(XmlError::Machine(
            "GPUs of different NVLink generations are joined directly; give one rate with --nvlink-bandwidth".to_string(),
        ));
    }
    let joined = nvlink_components(&counts, nvswitch.as_ref());
    let (pcie_links, pcie_switches) = pcie(m, &joined, opts.pcie_alpha, &mut notes);
    let (nic, nic_names, nic_problem) = match nics(m, opts.nic_alpha, &mut notes) {
        Ok((nic, names)) => (nic, names, None),
        Err(e) => (None, Vec::new(), Some(e)),
    };
    Ok(Parts {
        ranks: n,
        sm: m.gpus.iter().map(|g| g.sm).collect(),
        nvswitch,
        nvlinks: counts,
        nvlink_bandwidth,
        nvlink_alpha: opts.nvlink_alpha,
        pcie_links,
        pcie_switches,
        nic,
        nic_problem,
        nic_names,
        notes,
    })
}

/// The NVSwitch members (GPUs with NVLinks to switches) and their ports.
fn switch_part(switch_links: &[u32], per_link: &[Option<f64>]) -> Option<SwitchPart> {
    let members: Vec<usize> = (0..switch_links.len())
        .filter(|&i| switch_links[i] > 0)
        .collect();
    if members.len() < 2 {
        return None;
    }
    let ports = members
        .iter()
        .map(|&i| switch_links[i] as f64 * per_link[i].unwrap_or(0.0))
        .collect();
    Some(SwitchPart { members, ports })
}

/// The component id of each GPU under NVLink (direct or through the switch).
fn nvlink_components(counts: &[Vec<u32>], nvswitch: Option<&SwitchPart>) -> Vec<usize> {
    let n = counts.len();
    let mut comp: Vec<usize> = (0..n).collect();
    fn find(comp: &mut [usize], x: usize) -> usize {
        let mut r = x;
        while comp[r] != r {
            r = comp[r];
        }
        comp[x] = r;
        r
    }
    let join = |comp: &mut Vec<usize>, a: usize, b: usize| {
        let (ra, rb) = (find(comp, a), find(comp, b));
        comp[ra.max(rb)] = ra.min(rb);
    };
    for (i, row) in counts.iter().enumerate() {
        for (j, &k) in row.iter().enumerate() {
            if k > 0 {
                join(&mut comp, i, j);
            }
        }
    }
    if let Some(sw) = nvswitch {
        for w in sw.members.windows(2) {
            join(&mut comp, w[0], w[1]);
        }
    }
    (0..n).map(|i| find(&mut comp, i)).collect()
}

/// How many `<pci>` elements two places share (0 on different CPUs).
fn shared_hops(a: &Place, b: &Place) -> usize {
    if a.cpu != b.cpu {
        return 0;
    }
    a.chain
        .iter()
        .zip(&b.chain)
        .take_while(|(x, y)| x.busid == y.busid)
        .count()
}

/// PCIe links between GPUs of different NVLink components (the narrowest known hop on their
/// path, the CPUs' link where it crosses sockets) and the constraints of every hop and
/// socket pair that several such links share.
fn pcie(
    m: &Machine,
    joined: &[usize],
    alpha: f64,
    notes: &mut Vec<String>,
) -> (Vec<Link>, Vec<SwitchConstraint>) {
    let n = m.gpus.len();
    let cpu_rate = |c: usize| m.cpus.get(c).map_or(6.0, inter_cpu_bandwidth);
    let mut links = Vec::new();
    let mut unknown = false;
    for a in 0..n {
        for b in 0..n {
            if a == b || joined[a] == joined[b] {
                continue;
            }
            let (pa, pb) = (&m.gpus[a].place, &m.gpus[b].place);
            let k = shared_hops(pa, pb);
            let mut rates: Vec<f64> = pa.chain[k..]
                .iter()
                .chain(&pb.chain[k..])
                .filter_map(|h| h.bandwidth)
                .collect();
            if pa.cpu != pb.cpu {
                rates.push(cpu_rate(pa.cpu).min(cpu_rate(pb.cpu)));
            }
            let bandwidth = rates.into_iter().reduce(f64::min).unwrap_or_else(|| {
                unknown = true;
                DEFAULT_PCIE
            });
            links.push(Link {
                src: a,
                dst: b,
                bandwidth,
                alpha,
            });
        }
    }
    if unknown {
        notes.push(format!(
            "some PCIe paths give no link speed: taken as {DEFAULT_PCIE} GB/s (Gen3 x16)"
        ));
    }
    if links.is_empty() {
        return (links, Vec::new());
    }
    let pcie: BTreeSet<(usize, usize)> = links.iter().map(|l| (l.src, l.dst)).collect();
    // Constraints are listed innermost first on the sending side (GPU slots, then switches),
    // then the sockets, then outermost first on the receiving side, so that the flow network
    // (`flow::network`, which keeps a link's constraints in list order within each side)
    // nests them as the PCIe tree does.
    let mut ups: Vec<(usize, SwitchConstraint)> = Vec::new();
    let mut downs: Vec<(usize, SwitchConstraint)> = Vec::new();
    let mut sockets: Vec<SwitchConstraint> = Vec::new();
    let binding = |srcs: &[usize], dsts: &[usize], bandwidth: f64| {
        let covered: Vec<&Link> = links
            .iter()
            .filter(|l| srcs.contains(&l.src) && dsts.contains(&l.dst))
            .collect();
        // Only where the constraint binds: over PCIe links alone, more than one of them, or
        // one faster than the hop.
        let all_pcie = srcs
            .iter()
            .all(|&s| dsts.iter().all(|&d| pcie.contains(&(s, d))));
        let binds = covered.len() > 1 || covered.iter().any(|l| l.bandwidth > bandwidth);
        !covered.is_empty() && all_pcie && binds
    };
    let mut hops: BTreeMap<(usize, super::BusId), f64> = BTreeMap::new();
    for g in &m.gpus {
        for h in &g.place.chain {
            if let Some(bw) = h.bandwidth {
                hops.insert((g.place.cpu, h.busid), bw);
            }
        }
    }
    for (&(cpu, busid), &bw) in &hops {
        let below: Vec<usize> = (0..n)
            .filter(|&g| {
                let p = &m.gpus[g].place;
                p.cpu == cpu && p.chain.iter().any(|h| h.busid == busid)
            })
            .collect();
        let peers: Vec<usize> = (0..n)
            .filter(|g| !below.contains(g) && below.iter().any(|&s| pcie.contains(&(s, *g))))
            .collect();
        if peers.is_empty() {
            continue;
        }
        let k = below.len();
        if binding(&below, &peers, bw) {
            ups.push((
                k,
                SwitchConstraint {
                    name: format!("pcie-{busid}-up"),
                    srcs: below.clone(),
                    dsts: peers.clone(),
                    bandwidth: bw,
                },
            ));
        }
        if binding(&peers, &below, bw) {
            downs.push((
                k,
                SwitchConstraint {
                    name: format!("pcie-{busid}-down"),
                    srcs: peers,
                    dsts: below,
                    bandwidth: bw,
                },
            ));
        }
    }
    let cpus: BTreeSet<usize> = m.gpus.iter().map(|g| g.place.cpu).collect();
    let on = |c: usize| -> Vec<usize> { (0..n).filter(|&g| m.gpus[g].place.cpu == c).collect() };
    for &a in &cpus {
        for &b in &cpus {
            let bw = cpu_rate(a).min(cpu_rate(b));
            if a != b && binding(&on(a), &on(b), bw) {
                sockets.push(SwitchConstraint {
                    name: format!("cpu{a}-to-cpu{b}"),
                    srcs: on(a),
                    dsts: on(b),
                    bandwidth: bw,
                });
            }
        }
    }
    ups.sort_by_key(|(k, _)| *k);
    downs.sort_by_key(|(k, _)| std::cmp::Reverse(*k));
    let mut switches: Vec<SwitchConstraint> = Vec::new();
    let all = ups
        .into_iter()
        .map(|(_, s)| s)
        .chain(sockets)
        .chain(downs.into_iter().map(|(_, s)| s));
    for c in all {
        // Two hops over the same GPUs (a switch with one GPU below): the narrower.
        match switches
            .iter_mut()
            .find(|s| s.srcs == c.srcs && s.dsts == c.dsts)
        {
            Some(s) => s.bandwidth = s.bandwidth.min(c.bandwidth),
            None => switches.push(c),
        }
    }
    (links, switches)
}

/// How near GPU place `g` is to NIC place `nic`: 0 on another CPU, else 1 + the `<pci>`
/// elements they share.
fn nearness(g: &Place, nic: &Place) -> usize {
    if g.cpu != nic.cpu {
        0
    } else {
        1 + shared_hops(g, nic)
    }
}

/// Each used NIC by name with the ranks it serves.
type NicServes = Vec<(String, Vec<usize>)>;

/// The NICs each GPU uses (its nearest), as [`NicFacts`] (see [`nic_affinity`]).
fn nics(
    m: &Machine,
    alpha: f64,
    notes: &mut Vec<String>,
) -> Result<(Option<NicFacts>, NicServes), String> {
    if m.nets.is_empty() {
        return Ok((None, Vec::new()));
    }
    let nearest: Vec<BTreeSet<usize>> = m
        .gpus
        .iter()
        .map(|g| {
            let best = m
                .nets
                .iter()
                .map(|net| nearness(&g.place, &net.place))
                .max()
                .unwrap_or(0);
            (0..m.nets.len())
                .filter(|&j| nearness(&g.place, &m.nets[j].place) == best)
                .collect()
        })
        .collect();
    let nics: Vec<(String, f64)> = m
        .nets
        .iter()
        .map(|n| (n.name.clone(), n.bandwidth))
        .collect();
    let a = nic_affinity::affinity(&nearest, &nics, alpha)?;
    notes.extend(a.notes);
    Ok((Some(a.facts), a.serves))
}

impl Parts {
    /// The node fabric named `name`.
    pub fn topology(&self, name: &str) -> Topology {
        let n = self.ranks;
        let mut links: BTreeMap<(usize, usize), Link> = BTreeMap::new();
        let mut switches = Vec::new();
        if let Some(sw) = &self.nvswitch {
            for (a, &g) in sw.members.iter().enumerate() {
                for (b, &h) in sw.members.iter().enumerate() {
                    if g != h {
                        links.insert(
                            (g, h),
                            Link {
                                src: g,
                                dst: h,
                                bandwidth: sw.ports[a].min(sw.ports[b]),
                                alpha: self.nvlink_alpha,
                            },
                        );
                    }
                }
            }
            for (a, &g) in sw.members.iter().enumerate() {
                let others: Vec<usize> = sw.members.iter().copied().filter(|&h| h != g).collect();
                switches.push(SwitchConstraint {
                    name: format!("nvswitch-out-{g}"),
                    srcs: vec![g],
                    dsts: others.clone(),
                    bandwidth: sw.ports[a],
                });
                switches.push(SwitchConstraint {
                    name: format!("nvswitch-in-{g}"),
                    srcs: others,
                    dsts: vec![g],
                    bandwidth: sw.ports[a],
                });
            }
        }
        for i in 0..n {
            for j in 0..n {
                let k = self.nvlinks[i][j];
                if k == 0 {
                    continue;
                }
                let bw = k as f64 * self.nvlink_bandwidth;
                links
                    .entry((i, j))
                    .and_modify(|l| l.bandwidth += bw)
                    .or_insert(Link {
                        src: i,
                        dst: j,
                        bandwidth: bw,
                        alpha: self.nvlink_alpha,
                    });
            }
        }
        for l in &self.pcie_links {
            links.entry((l.src, l.dst)).or_insert_with(|| l.clone());
        }
        switches.extend(self.pcie_switches.iter().cloned());
        Topology {
            name: name.to_string(),
            ranks: n,
            node_of: vec![0; n],
            links: links.into_values().collect(),
            switches,
            runtime: None,
        }
    }
}
