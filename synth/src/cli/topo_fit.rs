//! `synth topo fit TABLES... --topo TOPO.toml`: alpha and bandwidth per link class, fitted
//! by least squares to nccl-tests tables, written into the topology TOML.
//!
//! A table run on one host measures the node's class: `nvlink` where the node has NVLink
//! (`nvswitch`, `matrix`), else `pcie` (its `[[link]]` and `[[switch]]`). A table over
//! several hosts measures `net` (`[multinode]` `nic_bandwidth`/`nic_alpha`, or `[nic]`).
//! Every row is modelled as a ring: time = hops x alpha + busbw-factor x size / B, with B
//! the modelled bandwidth (sendrecv: the link between ranks 0 and 1, or one GPU's NIC share;
//! collectives: the node's allgather bound, or the node's NICs together) times a scale the
//! fit finds. The class's bandwidths are multiplied by that scale and its alphas set.

use crate::cutbound::CutBound;
use crate::topology::fit::{self, Observation};
use crate::topology::nccl_tests::{self, Table, Test};
use crate::topology::{self, NicPlacement, Topology};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use runtime::ir::Collective;
use std::io::Write;
use std::path::{Path, PathBuf};
use toml_edit::{value, DocumentMut, Item};

/// Arguments of `synth topo fit`.
#[derive(Debug, Args)]
pub struct FitArgs {
    /// nccl-tests output files (sendrecv_perf, all_gather_perf, reduce_scatter_perf,
    /// all_reduce_perf, broadcast_perf, reduce_perf).
    #[arg(required = true)]
    tables: Vec<PathBuf>,
    /// The topology TOML to fit and rewrite (its `[multinode]` node file too).
    #[arg(long)]
    topo: PathBuf,
    /// Fit only rows of at least this many bytes (K/M/G suffixes, binary).
    #[arg(long, default_value = "1")]
    min_bytes: String,
    /// Print the fit without writing the TOML.
    #[arg(long)]
    dry_run: bool,
}

/// The link classes a table can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Class {
    Nvlink,
    Pcie,
    Net,
}

/// One table with its class and model bandwidth.
struct Measured {
    path: PathBuf,
    table: Table,
    class: Class,
    /// GB/s the model gives the table's pattern before the fit.
    model_gbps: f64,
}

/// Runs `synth topo fit`.
pub fn run(args: &FitArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let min_bytes =
        runtime::cpu::parse_size(&args.min_bytes).map_err(|e| anyhow!("--min-bytes: {e}"))? as f64;
    let files = Files::open(&args.topo)?;
    let mut measured = Vec::new();
    for path in &args.tables {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow!("{}: cannot read: {e}", path.display()))?;
        let hint = path
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let mut table = nccl_tests::read(&text, &hint).map_err(|e| match e {
            nccl_tests::TableError::Line { line, reason } => {
                anyhow!("{}:{line}: {reason}", path.display())
            }
            nccl_tests::TableError::File(reason) => anyhow!("{}: {reason}", path.display()),
        })?;
        table.rows.retain(|r| r.bytes >= min_bytes);
        if table.rows.len() < 2 {
            bail!(
                "{}: fewer than 2 rows of at least {min_bytes} bytes",
                path.display()
            );
        }
        let (class, model_gbps) = files
            .model(&table)
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        measured.push(Measured {
            path: path.clone(),
            table,
            class,
            model_gbps,
        });
    }
    let mut classes: Vec<Class> = measured.iter().map(|m| m.class).collect();
    classes.sort();
    classes.dedup();
    let mut results = Vec::new();
    for class in classes {
        let mine: Vec<&Measured> = measured.iter().filter(|m| m.class == class).collect();
        let obs: Vec<Observation> = mine.iter().flat_map(|m| observations(m)).collect();
        let f = fit::fit(&obs).map_err(|e| anyhow!("class {class:?}: {e}"))?;
        let per_table: Vec<serde_json::Value> = mine
            .iter()
            .map(|m| {
                let f = fit::fit(&observations(m)).ok();
                let rows: Vec<serde_json::Value> = m
                    .table
                    .rows
                    .iter()
                    .zip(f.as_ref().map_or(&[][..], |f| &f.residuals[..]))
                    .map(|(r, res)| serde_json::json!({"bytes": r.bytes, "time_us": r.time_us, "residual": res}))
                    .collect();
                serde_json::json!({
                    "file": m.path.display().to_string(),
                    "test": m.table.test,
                    "ranks": m.table.ranks,
                    "hosts": m.table.hosts,
                    "gib": m.table.gib,
                    "alpha_us": f.as_ref().map(|f| f.alpha_us),
                    "bandwidth_gbps": f.as_ref().map(|f| f.scale * m.model_gbps),
                    "rms_residual": f.as_ref().map(|f| f.rms),
                    "max_residual": f.as_ref().map(|f| f.max),
                    "rows": rows,
                })
            })
            .collect();
        results.push((class, f, per_table));
    }
    let mut written = Vec::new();
    if !args.dry_run {
        written = files.write(&results)?;
    }
    report(&results, &written, json, out)
}

/// The observations of one table.
fn observations(m: &Measured) -> Vec<Observation> {
    let (hops, factor) = m.table.test.ring_model(m.table.ranks);
    m.table
        .rows
        .iter()
        .map(|r| Observation {
            hops,
            load_us: factor * r.bytes / (m.model_gbps * 1e3),
            time_us: r.time_us,
        })
        .collect()
}

/// The topology TOML and its node file.
struct Files {
    cluster_path: PathBuf,
    cluster: DocumentMut,
    node_path: Option<PathBuf>,
    node: DocumentMut,
    node_topology: Topology,
    nic: Option<topology::NicFacts>,
}

fn parse_doc(path: &Path) -> Result<DocumentMut> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow!("{}: cannot read: {e}", path.display()))?;
    text.parse::<DocumentMut>().map_err(|e| {
        anyhow!(
            "{}: malformed TOML: {}",
            path.display(),
            e.to_string().lines().next().unwrap_or("")
        )
    })
}

fn number(item: &Item) -> Option<f64> {
    item.as_float()
        .or_else(|| item.as_integer().map(|i| i as f64))
}

impl Files {
    fn open(path: &Path) -> Result<Files> {
        // Loading checks the whole file first.
        topology::load(&path.display().to_string())?;
        let cluster = parse_doc(path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let node_spec = cluster
            .get("multinode")
            .and_then(|m| m.get("node"))
            .and_then(Item::as_str);
        let (node_path, node, node_topology, nic) = match node_spec {
            Some(spec) => {
                let p = dir.join(spec);
                if !(spec.ends_with(".toml") && p.is_file()) {
                    bail!("{}: [multinode] node '{spec}' is not a TOML file beside it; fit writes link costs into TOML (synth topo import the node first)", path.display());
                }
                let loaded = topology::resolve(&p.display().to_string(), None, 0)?;
                (Some(p.clone()), parse_doc(&p)?, loaded.topology, loaded.nic)
            }
            None => {
                let loaded = topology::resolve(&path.display().to_string(), None, 0)?;
                if loaded.topology.nodes() > 1 {
                    bail!("{}: a multi-node fabric without [multinode]; fit needs the node as its own file", path.display());
                }
                (None, cluster.clone(), loaded.topology, loaded.nic)
            }
        };
        let mut nic = nic;
        if let Some(m) = cluster.get("multinode") {
            let bw = m.get("nic_bandwidth").and_then(number);
            let placement = match (
                m.get("nics_per_gpu").and_then(Item::as_integer),
                m.get("nics_per_node").and_then(Item::as_integer),
            ) {
                (Some(k), _) => Some(NicPlacement::PerGpu(k as usize)),
                (_, Some(k)) => Some(NicPlacement::PerNode(k as usize)),
                _ => None,
            };
            nic = match (nic, bw) {
                (Some(mut n), bw) => {
                    n.bandwidth = bw.unwrap_or(n.bandwidth);
                    n.placement = placement.unwrap_or(n.placement);
                    Some(n)
                }
                (None, Some(bw)) => Some(topology::NicFacts {
                    bandwidth: bw,
                    alpha: topology::multinode::DEFAULT_NIC_ALPHA,
                    placement: placement.unwrap_or(NicPlacement::PerGpu(1)),
                }),
                (None, None) => None,
            };
        }
        Ok(Files {
            cluster_path: path.to_path_buf(),
            cluster,
            node_path,
            node,
            node_topology,
            nic,
        })
    }

    /// The class a table measures and the bandwidth the model gives its pattern.
    fn model(&self, t: &Table) -> Result<(Class, f64)> {
        let g = self.node_topology.ranks;
        if t.hosts == 0 {
            bail!("no '#  Rank N ... on HOST' lines, so the hosts it ran on (its link class) are unknown");
        }
        if t.hosts > 1 {
            let nic = self.nic.as_ref().ok_or_else(|| {
                anyhow!("ran on {} hosts but the topology has no NIC facts", t.hosts)
            })?;
            let per_gpu = match nic.placement {
                NicPlacement::PerGpu(k) => nic.bandwidth * k as f64,
                NicPlacement::PerNode(_) => nic.bandwidth,
            };
            let node_total = match nic.placement {
                NicPlacement::PerGpu(k) => nic.bandwidth * (k * g) as f64,
                NicPlacement::PerNode(k) => nic.bandwidth * k as f64,
            };
            let bw = if t.test == Test::SendRecv || t.ranks == t.hosts {
                per_gpu
            } else {
                node_total
            };
            return Ok((Class::Net, bw));
        }
        let class = if self.node.contains_key("nvswitch") || self.node.contains_key("matrix") {
            Class::Nvlink
        } else if self.node.contains_key("link") {
            Class::Pcie
        } else {
            bail!("the node has no nvswitch, matrix or [[link]] whose costs a fit could set");
        };
        if t.test == Test::SendRecv {
            let topo = &self.node_topology;
            let l = topo
                .link(0, 1)
                .ok_or_else(|| anyhow!("ranks 0 and 1 of the node have no link"))?;
            let bw = topo
                .switches
                .iter()
                .filter(|s| s.covers(0, 1))
                .fold(l.bandwidth, |b, s| b.min(s.bandwidth));
            return Ok((class, bw));
        }
        if t.ranks != g {
            bail!("ran {} ranks on one host but the node has {g}: run the collective on the whole node", t.ranks);
        }
        let bw = CutBound::new(Collective::AllGather, &self.node_topology, 0).busbw();
        if !(bw.is_finite() && bw > 0.0) {
            bail!("the node gives allgather no finite bandwidth");
        }
        Ok((class, bw))
    }

    /// Writes the fitted classes; returns the files written.
    fn write(
        mut self,
        results: &[(Class, fit::Fitted, Vec<serde_json::Value>)],
    ) -> Result<Vec<PathBuf>> {
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        let mut node_changed = false;
        let mut cluster_changed = false;
        for (class, f, _) in results {
            let (s, a) = (f.scale, round(f.alpha_us));
            match class {
                Class::Nvlink => {
                    if let Some(nv) = self.node.get_mut("nvswitch") {
                        let bw = number(&nv["bandwidth"]).unwrap_or(0.0);
                        nv["bandwidth"] = value(round(bw * s));
                        nv["alpha"] = value(a);
                    }
                    if self.node.contains_key("matrix") {
                        let bw = self
                            .node
                            .get("bandwidth")
                            .and_then(number)
                            .unwrap_or(topology::toml_format::DEFAULT_BANDWIDTH);
                        self.node["bandwidth"] = value(round(bw * s));
                        self.node["alpha"] = value(a);
                    }
                    node_changed = true;
                }
                Class::Pcie => {
                    for key in ["link", "switch"] {
                        if let Some(tables) = self
                            .node
                            .get_mut(key)
                            .and_then(Item::as_array_of_tables_mut)
                        {
                            for t in tables.iter_mut() {
                                if let Some(bw) = t.get("bandwidth").and_then(number) {
                                    t["bandwidth"] = value(round(bw * s));
                                }
                                if key == "link" {
                                    t["alpha"] = value(a);
                                }
                            }
                        }
                    }
                    node_changed = true;
                }
                Class::Net => {
                    let nic = self.nic.as_ref().expect("a net class has NIC facts");
                    let doc = &mut self.cluster;
                    if doc.contains_key("multinode") {
                        doc["multinode"]["nic_bandwidth"] = value(round(nic.bandwidth * s));
                        doc["multinode"]["nic_alpha"] = value(a);
                        cluster_changed = true;
                    } else {
                        let target = if self.node_path.is_some() {
                            &mut self.node
                        } else {
                            doc
                        };
                        target["nic"]["bandwidth"] = value(round(nic.bandwidth * s));
                        target["nic"]["alpha"] = value(a);
                        if self.node_path.is_some() {
                            node_changed = true
                        } else {
                            cluster_changed = true
                        }
                    }
                }
            }
        }
        // Without a node file the node document is the cluster file.
        if self.node_path.is_none() && node_changed {
            for (k, v) in self.node.iter() {
                if k != "nic" || !cluster_changed {
                    self.cluster[k] = v.clone();
                }
            }
            cluster_changed = true;
            node_changed = false;
        }
        let mut written = Vec::new();
        let mut backups = Vec::new();
        let mut save = |path: &Path, doc: &DocumentMut| -> Result<()> {
            backups.push((path.to_path_buf(), std::fs::read_to_string(path)?));
            std::fs::write(path, doc.to_string())
                .with_context(|| format!("{}: cannot write", path.display()))?;
            written.push(path.to_path_buf());
            Ok(())
        };
        if node_changed {
            if let Some(p) = &self.node_path {
                save(p, &self.node)?;
            }
        }
        if cluster_changed {
            save(&self.cluster_path, &self.cluster)?;
        }
        // The rewritten files must still load (bandwidths within range); else restore them.
        if let Err(e) = topology::load(&self.cluster_path.display().to_string()) {
            for (p, text) in backups {
                let _ = std::fs::write(&p, text);
            }
            bail!("the fitted values do not make a valid topology ({e}); files left unchanged");
        }
        Ok(written)
    }
}

fn report(
    results: &[(Class, fit::Fitted, Vec<serde_json::Value>)],
    written: &[PathBuf],
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    if json {
        let classes: Vec<serde_json::Value> = results
            .iter()
            .map(|(c, f, tables)| {
                serde_json::json!({
                    "class": c,
                    "alpha_us": f.alpha_us,
                    "bandwidth_scale": f.scale,
                    "rms_residual": f.rms,
                    "max_residual": f.max,
                    "tables": tables,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "classes": classes,
            "written": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    for (c, f, tables) in results {
        writeln!(
            out,
            "{c:?}: alpha {:.3} µs, bandwidth x{:.4} of the model; residuals rms {:.2}%, max {:.2}%",
            f.alpha_us,
            f.scale,
            100.0 * f.rms,
            100.0 * f.max
        )?;
        for t in tables {
            writeln!(
                out,
                "  {} ({}, {} ranks on {} hosts): alpha {:.3} µs, {:.2} GB/s, residuals rms {:.2}%, max {:.2}%",
                t["file"].as_str().unwrap_or(""),
                t["test"].as_str().unwrap_or(""),
                t["ranks"],
                t["hosts"],
                t["alpha_us"].as_f64().unwrap_or(f64::NAN),
                t["bandwidth_gbps"].as_f64().unwrap_or(f64::NAN),
                100.0 * t["rms_residual"].as_f64().unwrap_or(f64::NAN),
                100.0 * t["max_residual"].as_f64().unwrap_or(f64::NAN),
            )?;
        }
    }
    for p in written {
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}
