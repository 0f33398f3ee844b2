//! Import of `nvidia-smi topo -m` output.
//!
//! The matrix has a header row `GPU0 GPU1 ...` (followed by NIC and affinity columns) and one
//! row per GPU and per NIC. A cell `NV#` means `#` bonded NVLinks between the two GPUs; `X`,
//! `SYS`, `NODE`, `PHB`, `PXB`, `PIX` and the like mean no NVLink. The NIC columns
//! (`NIC0`, or `mlx5_0` in older versions, named by the `NIC Legend`) give each GPU's
//! nearest NICs (`PIX` < `PXB` < `PHB` < `NODE` < `SYS`), which [`parse_nvsmi_nics`] turns
//! into NIC facts; the CPU/NUMA affinity columns are ignored.
//!
//! On NVSwitch systems nvidia-smi reports every pair as `NV#` with the GPU's full link count
//! (e.g. `NV12` on a DGX-A100). When a GPU's `NV` counts add up to more than
//! [`MAX_DIRECT_NVLINKS`], no GPU could have that many direct links, so the GPUs are taken to
//! sit on an NVSwitch: each pair gets a link of the GPU's port bandwidth plus the per-GPU
//! "out" and "in" switch constraints.

use super::model::{Link, SwitchConstraint, Topology};
use anyhow::{anyhow, bail, Result};

/// The most NVLinks any GPU generation has (H100: 18); more in one row means an NVSwitch.
pub const MAX_DIRECT_NVLINKS: u32 = 18;
/// The largest `NV#` cell accepted: no GPU has more NVLinks (or NVSwitch ports) than this,
/// so a larger count is a corrupt file, not a fabric.
pub const MAX_CELL_NVLINKS: u32 = 64;

/// Parameters of the import.
#[derive(Debug, Clone, PartialEq)]
pub struct NvsmiOptions {
    /// Bandwidth of one NVLink in GB/s per direction (25 for NVLink2/V100).
    pub link_bandwidth: f64,
    /// Alpha of every link in µs.
    pub alpha: f64,
    /// GB/s of one NIC (nvidia-smi does not say; 25 = HDR InfiniBand, 200 Gb/s).
    pub nic_bandwidth: f64,
    /// NIC latency in µs.
    pub nic_alpha: f64,
}

impl Default for NvsmiOptions {
    fn default() -> Self {
        NvsmiOptions {
            link_bandwidth: 25.0,
            alpha: 0.7,
            nic_bandwidth: 25.0,
            nic_alpha: super::multinode::DEFAULT_NIC_ALPHA,
        }
    }
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn gpu_index(token: &str) -> Option<usize> {
    token.strip_prefix("GPU")?.parse().ok()
}

/// The line index (0-based) of the header row `GPU0 GPU1 ...`, if `text` has one.
fn header_line(lines: &[String]) -> Option<usize> {
    lines.iter().position(|l| {
        let mut t = l.split_whitespace();
        t.next() == Some("GPU0") && t.next() != Some("X")
    })
}

/// Whether `text` looks like `nvidia-smi topo -m` output (it has a `GPU0 ...` header row).
pub fn looks_like_nvsmi(text: &str) -> bool {
    let lines: Vec<String> = text.lines().take(200).map(strip_ansi).collect();
    header_line(&lines).is_some()
        && lines.iter().any(|l| {
            let mut t = l.split_whitespace();
            t.next() == Some("GPU0") && t.next() == Some("X")
        })
}

/// Parses `nvidia-smi topo -m` text into a topology named `name`. Errors say `line N: reason`.
pub fn parse_nvsmi(text: &str, name: &str, opts: &NvsmiOptions) -> Result<Topology> {
    if !(opts.link_bandwidth.is_finite() && opts.link_bandwidth > 0.0) {
        bail!("non-positive NVLink bandwidth {}", opts.link_bandwidth);
    }
    let lines: Vec<String> = text.lines().map(strip_ansi).collect();
    let h = header_line(&lines).ok_or_else(|| anyhow!("no header row starting with GPU0"))?;
    let n = gpu_count(&lines[h], h)?;
    let counts = nvlink_counts(&lines, h, n)?;
    check_symmetric(&counts)?;
    let bw = opts.link_bandwidth;
    let switched = counts
        .iter()
        .any(|r| r.iter().sum::<u32>() > MAX_DIRECT_NVLINKS);
    let mut links = Vec::new();
    for (i, row) in counts.iter().enumerate() {
        for (j, &k) in row.iter().enumerate() {
            if k > 0 {
                links.push(Link {
                    src: i,
                    dst: j,
                    bandwidth: bw * k as f64,
                    alpha: opts.alpha,
                });
            }
        }
    }
    if links.is_empty() {
        bail!("no NVLinks between the {n} GPUs (PCIe-only machines are not modelled)");
    }
    let switches = if switched {
        nvswitch_constraints(&counts, bw)
    } else {
        Vec::new()
    };
    let topo = Topology {
        name: name.to_string(),
        ranks: n,
        node_of: vec![0; n],
        links,
        switches,
        runtime: None,
    };
    topo.validate()?;
    Ok(topo)
}

/// The number of GPUs of the header row `header` (line index `h`): its leading `GPU#`
/// columns, which must be `GPU0`, `GPU1`, ... in order.
fn gpu_count(header: &str, h: usize) -> Result<usize> {
    let header: Vec<&str> = header.split_whitespace().collect();
    let n = header.iter().take_while(|t| gpu_index(t).is_some()).count();
    super::check_size(n, 0).map_err(|e| anyhow!("line {}: header: {e}", h + 1))?;
    for (i, t) in header.iter().take(n).enumerate() {
        if gpu_index(t) != Some(i) {
            bail!(
                "line {}: header column {} is '{t}', expected GPU{i}",
                h + 1,
                i + 1
            );
        }
    }
    Ok(n)
}

/// The NVLink counts between the `n` GPUs, one row per GPU, from the rows after the header
/// (line index `h`) up to the legend; every GPU must have exactly one row.
fn nvlink_counts(lines: &[String], h: usize, n: usize) -> Result<Vec<Vec<u32>>> {
    let mut counts: Vec<Option<Vec<u32>>> = vec![None; n];
    for (no, line) in lines.iter().enumerate().skip(h + 1) {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let Some(first) = tokens.first() else {
            continue;
        };
        if first.starts_with("Legend") {
            break;
        }
        let Some(i) = gpu_index(first) else { continue };
        if i >= n {
            bail!("line {}: row {first} but the header has {n} GPUs", no + 1);
        }
        if counts[i].is_some() {
            bail!("line {}: second row for {first}", no + 1);
        }
        if tokens.len() < n + 1 {
            bail!(
                "line {}: row {first} has {} cells, expected at least {n}",
                no + 1,
                tokens.len() - 1
            );
        }
        let mut row = Vec::with_capacity(n);
        for (j, cell) in tokens[1..=n].iter().enumerate() {
            let k = nvlink_cell(no, first, j, cell)?;
            if i == j && k != 0 {
                bail!("line {}: {first} has NVLinks to itself", no + 1);
            }
            row.push(k);
        }
        counts[i] = Some(row);
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.ok_or_else(|| anyhow!("no row for GPU{i}")))
        .collect()
}

/// The NVLink count of `cell` in column `GPU{j}` of row `first` (line index `no`): `NV#`
/// gives `#`, a word (`X`, `SYS`, `PIX`, ...) gives 0.
fn nvlink_cell(no: usize, first: &str, j: usize, cell: &str) -> Result<u32> {
    let k = if let Some(num) = cell.strip_prefix("NV") {
        num.parse::<u32>()
            .map_err(|_| anyhow!("line {}: {first} column GPU{j}: bad cell '{cell}'", no + 1))?
    } else if cell.chars().all(|c| c.is_ascii_alphabetic()) {
        0
    } else {
        bail!(
            "line {}: {first} column GPU{j}: unknown cell '{cell}'",
            no + 1
        );
    };
    if k > MAX_CELL_NVLINKS {
        bail!(
            "line {}: {first} column GPU{j}: cell '{cell}' has more NVLinks than any GPU (at most {MAX_CELL_NVLINKS})",
            no + 1
        );
    }
    Ok(k)
}

/// How far a GPU is from a NIC by its `topo -m` cell (smaller is nearer), `None` for a
/// cell that names no PCIe path.
fn nic_distance(cell: &str) -> Option<u8> {
    match cell {
        "PIX" => Some(0),
        "PXB" => Some(1),
        "PHB" => Some(2),
        "NODE" => Some(3),
        "SYS" => Some(4),
        _ => None,
    }
}

/// The NIC facts of `nvidia-smi topo -m` text: the NIC columns of the header (up to `CPU
/// Affinity`), named by the `NIC Legend` where there is one, and in each GPU row the cells
/// under them; each GPU uses its nearest NICs (see [`super::nic_affinity`]). `None` when
/// the matrix has no NIC columns. Errors say `line N: reason`.
pub fn parse_nvsmi_nics(
    text: &str,
    opts: &NvsmiOptions,
) -> Result<Option<super::nic_affinity::Affinity>> {
    super::check_bandwidth(opts.nic_bandwidth).map_err(|e| anyhow!("NIC {e}"))?;
    let lines: Vec<String> = text.lines().map(strip_ansi).collect();
    let h = header_line(&lines).ok_or_else(|| anyhow!("no header row starting with GPU0"))?;
    let n = gpu_count(&lines[h], h)?;
    let header: Vec<&str> = lines[h].split_whitespace().collect();
    let columns: Vec<String> = header[n..]
        .iter()
        .take_while(|t| !matches!(**t, "CPU" | "NUMA" | "GPU"))
        .map(|t| t.to_string())
        .collect();
    if columns.is_empty() {
        return Ok(None);
    }
    let legend: std::collections::HashMap<String, String> = lines
        .iter()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            let k = k.trim();
            (k.starts_with("NIC") && k[3..].bytes().all(|b| b.is_ascii_digit()))
                .then(|| (k.to_string(), v.trim().to_string()))
        })
        .collect();
    let m = columns.len();
    let mut nearest: Vec<Option<std::collections::BTreeSet<usize>>> = vec![None; n];
    for (no, line) in lines.iter().enumerate().skip(h + 1) {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let Some(first) = tokens.first() else {
            continue;
        };
        if first.starts_with("Legend") {
            break;
        }
        let Some(i) = gpu_index(first).filter(|&i| i < n) else {
            continue;
        };
        if tokens.len() < n + m + 1 {
            bail!(
                "line {}: row {first} has {} cells, expected {} GPU and {m} NIC cells",
                no + 1,
                tokens.len() - 1,
                n
            );
        }
        let mut dist = Vec::with_capacity(m);
        for (j, cell) in tokens[n + 1..=n + m].iter().enumerate() {
            let d = nic_distance(cell).ok_or_else(|| {
                anyhow!(
                    "line {}: {first} column {}: unknown NIC cell '{cell}' (expected PIX, PXB, PHB, NODE or SYS)",
                    no + 1,
                    columns[j]
                )
            })?;
            dist.push(d);
        }
        let best = *dist.iter().min().expect("m > 0");
        nearest[i] = Some((0..m).filter(|&j| dist[j] == best).collect());
    }
    let nearest: Vec<_> = nearest
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.ok_or_else(|| anyhow!("no row for GPU{i}")))
        .collect::<Result<_>>()?;
    let nics: Vec<(String, f64)> = columns
        .iter()
        .map(|c| {
            (
                legend.get(c).cloned().unwrap_or_else(|| c.clone()),
                opts.nic_bandwidth,
            )
        })
        .collect();
    super::nic_affinity::affinity(&nearest, &nics, opts.nic_alpha)
        .map(Some)
        .map_err(|e| anyhow!("{e}"))
}

/// Checks that GPU i has as many NVLinks to GPU j as j to i.
fn check_symmetric(counts: &[Vec<u32>]) -> Result<()> {
    for (i, row) in counts.iter().enumerate() {
        for (j, &k) in row.iter().enumerate() {
            if k != counts[j][i] {
                bail!(
                    "matrix not symmetric: GPU{i}-GPU{j} has NV{k} but GPU{j}-GPU{i} has NV{}",
                    counts[j][i]
                );
            }
        }
    }
    Ok(())
}

/// The NVSwitch constraints of GPUs whose NVLinks go through a switch: per GPU with peers,
/// an "out" and an "in" constraint of its port bandwidth (its largest count x `bw`).
fn nvswitch_constraints(counts: &[Vec<u32>], bw: f64) -> Vec<SwitchConstraint> {
    let mut switches = Vec::new();
    for (g, row) in counts.iter().enumerate() {
        let port = bw * *row.iter().max().unwrap_or(&0) as f64;
        let peers: Vec<usize> = (0..counts.len()).filter(|&h| row[h] > 0).collect();
        if peers.is_empty() {
            continue;
        }
        switches.push(SwitchConstraint {
            name: format!("nvswitch-out-{g}"),
            srcs: vec![g],
            dsts: peers.clone(),
            bandwidth: port,
        });
        switches.push(SwitchConstraint {
            name: format!("nvswitch-in-{g}"),
            srcs: peers,
            dsts: vec![g],
            bandwidth: port,
        });
    }
    switches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvswitch_box() {
        let mut text = String::from("\t\x1b[4mGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\x1b[0m\n");
        text += "GPU0\t X \tNV12\tNV12\tSYS\t0-63\n";
        text += "GPU1\tNV12\t X \tNV12\tSYS\t0-63\n";
        text += "GPU2\tNV12\tNV12\t X \tPXB\t0-63\n";
        text += "NIC0\tSYS\tSYS\tPXB\t X\n\nLegend:\n\n  X    = Self\n";
        assert!(looks_like_nvsmi(&text));
        let t = parse_nvsmi(&text, "a100", &NvsmiOptions::default()).unwrap();
        assert_eq!(t.ranks, 3);
        assert_eq!(t.links.len(), 6);
        assert_eq!(t.switches.len(), 6);
        assert_eq!(t.link(0, 1).unwrap().bandwidth, 300.0);
    }

    #[test]
    fn nic_rows_become_nic_facts() {
        // A DGX-H100 as nvidia-smi prints it: NIC0 is an Ethernet port nearest no GPU.
        let mut text = String::from("\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tNIC2\tNIC3\tNIC4\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n");
        text += "GPU0\t X \tNV18\tNV18\tNV18\tSYS\tPIX\tNODE\tSYS\tSYS\t0-55\t0\t\tN/A\n";
        text += "GPU1\tNV18\t X \tNV18\tNV18\tSYS\tNODE\tPIX\tSYS\tSYS\t0-55\t0\t\tN/A\n";
        text += "GPU2\tNV18\tNV18\t X \tNV18\tSYS\tSYS\tSYS\tPIX\tNODE\t56-111\t1\t\tN/A\n";
        text += "GPU3\tNV18\tNV18\tNV18\t X \tSYS\tSYS\tSYS\tNODE\tPIX\t56-111\t1\t\tN/A\n";
        text += "NIC0\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tSYS\tSYS\n\nLegend:\n\n  X    = Self\n\n";
        text += "NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n  NIC2: mlx5_2\n  NIC3: mlx5_3\n  NIC4: mlx5_4\n";
        let opts = NvsmiOptions {
            nic_bandwidth: 50.0,
            ..NvsmiOptions::default()
        };
        let a = parse_nvsmi_nics(&text, &opts).unwrap().unwrap();
        assert_eq!(a.facts.placement, super::super::NicPlacement::PerGpu(1));
        assert_eq!(a.facts.bandwidth, 50.0);
        assert_eq!(a.serves[0], ("mlx5_1".to_string(), vec![0]));
        assert_eq!(a.notes.len(), 1, "{:?}", a.notes);
        // One NIC on the first socket shared by all four GPUs.
        let mut shared = String::from("\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\n");
        for (g, cell) in ["PXB", "PXB", "SYS", "SYS"].iter().enumerate() {
            let nv: Vec<&str> = (0..4)
                .map(|h| if h == g { " X " } else { "NV18" })
                .collect();
            shared += &format!("GPU{g}\t{}\t{cell}\t0-55\n", nv.join("\t"));
        }
        let a = parse_nvsmi_nics(&shared, &opts).unwrap().unwrap();
        assert_eq!(a.facts.placement, super::super::NicPlacement::PerNode(1));
        let bad = text.replace("\tPIX\tNODE\tSYS\tSYS\t0-55", "\tPIX\tNV2\tSYS\tSYS\t0-55");
        let e = parse_nvsmi_nics(&bad, &opts).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 2: GPU0 column NIC2: unknown NIC cell 'NV2'"),
            "{e}"
        );
    }

    #[test]
    fn asymmetric_is_an_error() {
        let text = "  GPU0 GPU1\nGPU0 X NV1\nGPU1 NV2 X\n";
        let e = parse_nvsmi(text, "x", &NvsmiOptions::default()).unwrap_err();
        assert!(e.to_string().contains("not symmetric"), "{e}");
    }
}
