//! `synth topo list | show NAME | dot NAME | import FILE | fit TABLES`.

use crate::topology;
use clap::{Args, Subcommand};
use std::io::Write;

/// Arguments of `synth topo`.
#[derive(Debug, Args)]
pub struct TopoArgs {
    #[command(subcommand)]
    action: TopoAction,
}

#[derive(Debug, Subcommand)]
enum TopoAction {
    /// List the built-in topologies.
    List,
    /// Ranks, links, per-rank bandwidth, diameter, automorphisms and integer capacities.
    Show {
        /// Built-in name or file.
        name: String,
    },
    /// Graphviz text of the topology.
    Dot {
        /// Built-in name or file.
        name: String,
    },
    /// Write a topology TOML from NCCL's topology dump (`NCCL_TOPO_DUMP_FILE`) or
    /// `nvidia-smi topo -m` text, for one node or several joined by a network.
    Import(super::topo_import::ImportArgs),
    /// Fit alpha and bandwidth per link class to nccl-tests output and write them into a
    /// topology TOML, with the residuals of the fit.
    Fit(super::topo_fit::FitArgs),
}

/// Runs `synth topo`.
pub fn run(args: &TopoArgs, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    match &args.action {
        TopoAction::List => {
            let names = topology::builtin_names();
            if json {
                let list: Vec<_> = names
                    .iter()
                    .map(|(n, d)| serde_json::json!({"name": n, "description": d}))
                    .collect();
                writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
            } else {
                for (name, description) in names {
                    writeln!(out, "{name:<18} {description}")?;
                }
            }
        }
        TopoAction::Show { name } => {
            let topo = topology::load(name)?;
            let summary = topo.summary();
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
            } else {
                write!(out, "{summary}")?;
            }
        }
        TopoAction::Import(a) => super::topo_import::run(a, json, out)?,
        TopoAction::Fit(a) => super::topo_fit::run(a, json, out)?,
        TopoAction::Dot { name } => {
            let topo = topology::load(name)?;
            if json {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"name": topo.name, "dot": topo.to_dot()})
                )?;
            } else {
                write!(out, "{}", topo.to_dot())?;
            }
        }
    }
    Ok(())
}
