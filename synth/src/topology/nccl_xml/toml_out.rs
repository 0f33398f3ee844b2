//! The topology TOML `synth topo import` writes from an NCCL dump: a node file (NVLink as
//! `nvswitch` and `matrix`, PCIe as `[[link]]` and `[[switch]]`, the NICs as `[nic]`) and,
//! for several nodes, a cluster file whose `[multinode]` names the node file. Each link
//! class keeps its bandwidth and alpha where `synth topo fit` finds and rewrites them.

use super::fabric::Parts;
use crate::topology::multinode::{Network, NicFacts, NicPlacement};
use std::fmt::Write;

/// The node TOML of `parts`, named `name`, imported from `source`.
pub fn node_toml(parts: &Parts, name: &str, source: &str) -> String {
    let mut t = String::new();
    let sms: std::collections::BTreeSet<u32> = parts.sm.iter().copied().collect();
    let sms: Vec<String> = sms.iter().map(|s| s.to_string()).collect();
    let _ = writeln!(
        t,
        "# Imported by `synth topo import` from {source} (NCCL topology dump): {} GPUs (sm {}).",
        parts.ranks,
        sms.join(", ")
    );
    let _ = writeln!(
        t,
        "# Link classes, as `synth topo fit` rewrites them: nvlink = `nvswitch` (per GPU port) and\n\
         # the top-level `bandwidth` (one NVLink) and `alpha`; pcie = every [[link]] and [[switch]];\n\
         # net = [nic]."
    );
    for note in &parts.notes {
        let _ = writeln!(t, "# note: {}", crate::util::escape_line_breaks(note));
    }
    let _ = writeln!(t, "name = {}", quote(name));
    let _ = writeln!(t, "ranks = {}", parts.ranks);
    let _ = writeln!(
        t,
        "bandwidth = {}   # GB/s of one NVLink",
        num(parts.nvlink_bandwidth)
    );
    let _ = writeln!(t, "alpha = {}       # µs, NVLink", num(parts.nvlink_alpha));
    let overlap = parts.nvswitch.as_ref().is_some_and(|sw| {
        sw.members
            .iter()
            .any(|&g| sw.members.iter().any(|&h| parts.nvlinks[g][h] > 0))
    });
    let uniform = parts.nvswitch.as_ref().and_then(|sw| sw.uniform_port());
    let explicit = parts.nvswitch.is_some() && (uniform.is_none() || overlap);
    if parts.nvlinks.iter().flatten().any(|&k| k > 0) && !explicit {
        let _ = writeln!(t, "# direct NVLinks between GPUs (count per pair)");
        let _ = writeln!(t, "matrix = [");
        for row in &parts.nvlinks {
            let cells: Vec<String> = row.iter().map(|k| k.to_string()).collect();
            let _ = writeln!(t, "  [{}],", cells.join(", "));
        }
        let _ = writeln!(t, "]");
    }
    if let (Some(sw), Some(port), false) = (&parts.nvswitch, uniform, explicit) {
        let ranks = if sw.members.len() == parts.ranks {
            String::new()
        } else {
            format!(", ranks = {:?}", sw.members)
        };
        let _ = writeln!(
            t,
            "# NVSwitch: GB/s per GPU port ({} NVLinks)\nnvswitch = {{ bandwidth = {}, alpha = {}{ranks} }}",
            port / parts.nvlink_bandwidth,
            num(port),
            num(parts.nvlink_alpha)
        );
    }
    if explicit {
        // NVSwitch ports that differ between GPUs: every link and port written out.
        let topo = parts.topology(name);
        let pcie: std::collections::BTreeSet<(usize, usize)> =
            parts.pcie_links.iter().map(|l| (l.src, l.dst)).collect();
        for l in topo
            .links
            .iter()
            .filter(|l| !pcie.contains(&(l.src, l.dst)))
        {
            let _ = writeln!(
                t,
                "\n[[link]]   # nvlink\nsrc = {}\ndst = {}\nbandwidth = {}\nalpha = {}\nbidirectional = false",
                l.src,
                l.dst,
                num(l.bandwidth),
                num(l.alpha)
            );
        }
        for s in topo
            .switches
            .iter()
            .filter(|s| s.name.starts_with("nvswitch"))
        {
            write_switch(&mut t, s, "nvlink");
        }
    }
    for l in parts.pcie_links.iter().filter(|l| l.src < l.dst) {
        let back = parts
            .pcie_links
            .iter()
            .find(|b| b.src == l.dst && b.dst == l.src);
        let both = back.is_some_and(|b| b.bandwidth == l.bandwidth && b.alpha == l.alpha);
        let _ = writeln!(
            t,
            "\n[[link]]   # pcie\nsrc = {}\ndst = {}\nbandwidth = {}\nalpha = {}",
            l.src,
            l.dst,
            num(l.bandwidth),
            num(l.alpha)
        );
        if !both {
            let _ = writeln!(t, "bidirectional = false");
            if let Some(b) = back {
                let _ = writeln!(
                    t,
                    "\n[[link]]   # pcie\nsrc = {}\ndst = {}\nbandwidth = {}\nalpha = {}\nbidirectional = false",
                    b.src,
                    b.dst,
                    num(b.bandwidth),
                    num(b.alpha)
                );
            }
        }
    }
    for s in &parts.pcie_switches {
        write_switch(&mut t, s, "pcie");
    }
    if let Some(nic) = &parts.nic {
        let _ = writeln!(t, "\n# NICs nearest the GPUs:");
        for (name, gpus) in &parts.nic_names {
            let _ = writeln!(t, "#   {name} serves GPU {gpus:?}");
        }
        write_nic(&mut t, nic);
    }
    t
}

fn write_switch(t: &mut String, s: &crate::topology::SwitchConstraint, class: &str) {
    let _ = writeln!(
        t,
        "\n[[switch]]   # {class}\nname = {}\nsrcs = {:?}\ndsts = {:?}\nbandwidth = {}",
        quote(&s.name),
        s.srcs,
        s.dsts,
        num(s.bandwidth)
    );
}

fn write_nic(t: &mut String, nic: &NicFacts) {
    let _ = writeln!(
        t,
        "[nic]\nbandwidth = {}   # GB/s per NIC",
        num(nic.bandwidth)
    );
    let _ = writeln!(t, "alpha = {}       # µs", num(nic.alpha));
    match nic.placement {
        NicPlacement::PerGpu(k) => {
            let _ = writeln!(t, "per_gpu = {k}");
        }
        NicPlacement::PerNode(k) => {
            let _ = writeln!(t, "per_node = {k}");
        }
    }
}

/// The cluster TOML: `nodes` copies of the node file `node_file` (a path relative to the
/// cluster file) joined by `network` through the node's NICs `nic`.
pub fn cluster_toml(
    name: &str,
    node_file: &str,
    nodes: usize,
    network: Network,
    nic: &NicFacts,
    source: &str,
) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# Imported by `synth topo import` from {source}: {nodes} nodes of {node_file} joined by a\n\
         # {} network. Link class net = nic_bandwidth and nic_alpha (`synth topo fit`).",
        network.as_str()
    );
    let _ = writeln!(t, "name = {}\n\n[multinode]", quote(name));
    let _ = writeln!(t, "node = {}", quote(node_file));
    let _ = writeln!(t, "nodes = {nodes}");
    let _ = writeln!(t, "network = {}", quote(network.as_str()));
    let _ = writeln!(t, "nic_bandwidth = {}   # GB/s per NIC", num(nic.bandwidth));
    let _ = writeln!(t, "nic_alpha = {}       # µs", num(nic.alpha));
    match nic.placement {
        NicPlacement::PerGpu(k) => {
            let _ = writeln!(t, "nics_per_gpu = {k}");
        }
        NicPlacement::PerNode(k) => {
            let _ = writeln!(t, "nics_per_node = {k}");
        }
    }
    t
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A number as TOML: integers without a fraction.
fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}
