//! `synth topo import FILE [--nodes K --network NAME] --out TOPO.toml`: a topology TOML from
//! NCCL's topology dump (`NCCL_TOPO_DUMP_FILE`) or `nvidia-smi topo -m` text.

use crate::topology::nccl_xml::{self, fabric, toml_out};
use crate::topology::{self, Network, NvsmiOptions, Topology};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Arguments of `synth topo import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// NCCL topology dump (`NCCL_TOPO_DUMP_FILE=system.xml`) or `nvidia-smi topo -m` text.
    file: PathBuf,
    /// Nodes of this kind joined by the network (writes a node TOML beside --out).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    nodes: u64,
    /// Network between the nodes: `fat-tree` or `rail`.
    #[arg(long, default_value = "fat-tree", value_parser = ["fat-tree", "rail"])]
    network: String,
    /// The topology TOML to write (with --nodes above 1 also `STEM-node.toml` beside it);
    /// without it the node TOML goes to stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// GB/s of one NVLink, where the GPU generation's figure is not wanted (nvidia-smi
    /// text: default 25).
    #[arg(long)]
    nvlink_bandwidth: Option<f64>,
    /// GB/s of one NIC for nvidia-smi text, which does not say (default 25, HDR).
    #[arg(long)]
    nic_bandwidth: Option<f64>,
}

/// Runs `synth topo import`.
pub fn run(args: &ImportArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let path = &args.file;
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow!("{}: cannot read: {e}", path.display()))?;
    for (flag, v) in [
        ("--nvlink-bandwidth", args.nvlink_bandwidth),
        ("--nic-bandwidth", args.nic_bandwidth),
    ] {
        if let Some(v) = v {
            topology::check_bandwidth(v).map_err(|e| anyhow!("{flag}: {e}"))?;
        }
    }
    let parts = if nccl_xml::looks_like_nccl_xml(&text) {
        if args.nic_bandwidth.is_some() {
            bail!("--nic-bandwidth is for nvidia-smi text; an NCCL dump gives each NIC's speed");
        }
        let opts = fabric::Options {
            nvlink_bandwidth: args.nvlink_bandwidth,
            ..fabric::Options::default()
        };
        topology::nccl_xml_parts(path, &text, &opts)?
    } else if topology::nvsmi::looks_like_nvsmi(&text) {
        nvsmi_parts(path, &text, args)?
    } else {
        bail!(
            "{}: neither an NCCL topology dump (<system ...>) nor nvidia-smi topo -m text (a GPU0 header row)",
            path.display()
        );
    };
    let network = Network::parse(&args.network)?;
    let nodes = args.nodes as usize;
    let source = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let Some(target) = &args.out else {
        if nodes > 1 {
            bail!("--nodes {nodes} writes two files (the node and the cluster): give --out");
        }
        let name = sanitize(&stem(path));
        let toml = toml_out::node_toml(&parts, &name, &source);
        if json {
            writeln!(
                out,
                "{}",
                serde_json::json!({"topology": name, "toml": toml})
            )?;
        } else {
            write!(out, "{toml}")?;
        }
        return Ok(());
    };
    let name = sanitize(&stem(target));
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    let mut written = Vec::new();
    let expected: Topology = if nodes == 1 {
        std::fs::write(target, toml_out::node_toml(&parts, &name, &source))
            .with_context(|| format!("{}: cannot write", target.display()))?;
        written.push(target.clone());
        parts.topology(&name)
    } else {
        let Some(nic) = &parts.nic else {
            let why = parts
                .nic_problem
                .clone()
                .unwrap_or_else(|| "the file lists no NIC".to_string());
            bail!("{}: cannot join {nodes} nodes: {why}", path.display());
        };
        let node_file = format!("{name}-node.toml");
        let node_path = dir.join(&node_file);
        std::fs::write(
            &node_path,
            toml_out::node_toml(&parts, &format!("{name}-node"), &source),
        )
        .with_context(|| format!("{}: cannot write", node_path.display()))?;
        let cluster = toml_out::cluster_toml(&name, &node_file, nodes, network, nic, &source);
        std::fs::write(target, cluster)
            .with_context(|| format!("{}: cannot write", target.display()))?;
        written.push(node_path);
        written.push(target.clone());
        let node = parts.topology(&name);
        topology::multinode::compose(&node, nodes, nic, network, &name)?
    };
    // The files must read back as the fabric imported.
    let loaded = topology::load(&target.display().to_string())?;
    let sorted = |t: &Topology| {
        let mut links = t.links.clone();
        links.sort_by_key(|l| (l.src, l.dst));
        let mut switches = t.switches.clone();
        switches.sort_by(|a, b| a.name.cmp(&b.name));
        (links, switches)
    };
    if sorted(&loaded) != sorted(&expected) {
        bail!(
            "{}: the written TOML does not read back as the imported fabric (a synth bug)",
            target.display()
        );
    }
    report(&parts, &loaded, &written, json, out)
}

/// The parts of `nvidia-smi topo -m` text: NVLink counts (an NVSwitch where counts say so)
/// and the NIC facts of its NIC columns.
fn nvsmi_parts(path: &Path, text: &str, args: &ImportArgs) -> Result<fabric::Parts> {
    let mut opts = NvsmiOptions::default();
    if let Some(bw) = args.nvlink_bandwidth {
        opts.link_bandwidth = bw;
    }
    if let Some(bw) = args.nic_bandwidth {
        opts.nic_bandwidth = bw;
    }
    let loaded = topology::load_nvsmi(path, text, &opts)?;
    let t = loaded.topology;
    let n = t.ranks;
    let switched: Vec<usize> = t
        .switches
        .iter()
        .filter_map(|s| s.name.strip_prefix("nvswitch-out-")?.parse().ok())
        .collect();
    let mut nvlinks = vec![vec![0u32; n]; n];
    let nvswitch = if switched.is_empty() {
        for l in &t.links {
            nvlinks[l.src][l.dst] = (l.bandwidth / opts.link_bandwidth).round() as u32;
        }
        None
    } else {
        let ports = switched
            .iter()
            .map(|g| {
                t.switches
                    .iter()
                    .find(|s| s.name == format!("nvswitch-out-{g}"))
                    .map_or(0.0, |s| s.bandwidth)
            })
            .collect();
        Some(fabric::SwitchPart {
            members: switched,
            ports,
        })
    };
    let mut notes = Vec::new();
    let affinity = topology::nvsmi::parse_nvsmi_nics(text, &opts);
    let (nic, nic_names, nic_problem) = match affinity {
        Ok(Some(a)) => {
            notes.extend(a.notes);
            notes.push(format!(
                "NIC speed {} GB/s assumed (nvidia-smi does not say; --nic-bandwidth)",
                opts.nic_bandwidth
            ));
            (Some(a.facts), a.serves, None)
        }
        Ok(None) => (None, Vec::new(), None),
        Err(e) => (None, Vec::new(), Some(e.to_string())),
    };
    Ok(fabric::Parts {
        ranks: n,
        sm: Vec::new(),
        nvswitch,
        nvlinks,
        nvlink_bandwidth: opts.link_bandwidth,
        nvlink_alpha: opts.alpha,
        pcie_links: Vec::new(),
        pcie_switches: Vec::new(),
        nic,
        nic_problem,
        nic_names,
        notes,
    })
}

fn report(
    parts: &fabric::Parts,
    topo: &Topology,
    written: &[PathBuf],
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let nic = parts.nic.as_ref().map(|n| {
        serde_json::json!({"bandwidth_gbps": n.bandwidth, "alpha_us": n.alpha, "placement": n.placement})
    });
    if json {
        let doc = serde_json::json!({
            "topology": topo.name,
            "ranks": topo.ranks,
            "nodes": topo.nodes(),
            "files": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "nvlink_gbps": parts.nvlink_bandwidth,
            "nvswitch_ports_gbps": parts.nvswitch.as_ref().map(|s| s.ports.clone()),
            "pcie_links": parts.pcie_links.len(),
            "nic": nic,
            "nics": parts.nic_names,
            "nic_problem": parts.nic_problem,
            "notes": parts.notes,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    for p in written {
        writeln!(out, "wrote {}", p.display())?;
    }
    writeln!(out, "{} ranks on {} node(s)", topo.ranks, topo.nodes())?;
    if let Some(sw) = &parts.nvswitch {
        let ports: Vec<String> = sw.ports.iter().map(|p| p.to_string()).collect();
        writeln!(
            out,
            "  NVSwitch: GPUs {:?}, port GB/s {}",
            sw.members,
            ports.join(", ")
        )?;
    }
    let direct = parts.nvlinks.iter().flatten().filter(|&&k| k > 0).count();
    if direct > 0 {
        writeln!(
            out,
            "  direct NVLinks: {direct} directed pairs, {} GB/s per link",
            parts.nvlink_bandwidth
        )?;
    }
    if !parts.pcie_links.is_empty() {
        writeln!(
            out,
            "  PCIe: {} directed links, {} constraints",
            parts.pcie_links.len(),
            parts.pcie_switches.len()
        )?;
    }
    if let Some(n) = &parts.nic {
        writeln!(out, "  NICs: {} GB/s, {:?}", n.bandwidth, n.placement)?;
        for (name, gpus) in &parts.nic_names {
            writeln!(out, "    {name} serves GPU {gpus:?}")?;
        }
    }
    if let Some(p) = &parts.nic_problem {
        writeln!(out, "  NICs: none modelled: {p}")?;
    }
    for note in &parts.notes {
        writeln!(out, "  note: {note}")?;
    }
    Ok(())
}

fn stem(path: &Path) -> String {
    path.file_stem().map_or_else(
        || "imported".to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// `name` with the characters MSCCL XML names cannot carry replaced by `-`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if runtime::limits::name_char(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}
