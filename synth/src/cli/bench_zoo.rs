//! `synth bench --cases zoo`: the main command on fabrics like users' (tori of every shape,
//! a hypercube, a mesh, multi-node clusters, an oversubscribed fat-tree, seeded random
//! fabrics), each once as written and once under a random renumbering of its ranks, in a
//! child process per run: wall and CPU time, peak memory, busbw at 1 GB against the exact
//! optimum and NCCL, and how far the renumbered twin lands from its original.

use super::bench_cmd::{nccl_best, optimum_key, run_main_command, scratch_dir, BenchArgs};
use anyhow::{bail, Result};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;

/// The zoo: a label and the topology TOML of each fabric.
pub const ZOO: &[(&str, &str)] = &[
    ("torus-2d:4x8", "generator = \"torus-2d\"\nsize = \"4x8\"\n"),
    ("torus-2d:8x16", "generator = \"torus-2d\"\nsize = \"8x16\"\n"),
    ("torus-3d:4x4x4", "generator = \"torus-3d\"\nsize = \"4x4x4\"\n"),
    ("hypercube:64", "generator = \"hypercube\"\nsize = 64\n"),
    ("mesh-2d:8x8", "generator = \"mesh-2d\"\nsize = \"8x8\"\n"),
    (
        "dgx-h100x8",
        "[multinode]\nnode = \"dgx-h100\"\nnodes = 8\n",
    ),
    (
        "dgx-a100x4-oversubscribed-4to1",
        "name = \"dgx-a100x4-os4\"\n[multinode]\nnode = \"dgx-a100\"\nnodes = 4\noversubscription = 4\n",
    ),
    ("random:24:1", "generator = \"random\"\nsize = \"24:1\"\n"),
    ("random:48:2", "generator = \"random\"\nsize = \"48:2\"\n"),
];

/// The seed of the twins' renumbering (`relabel = 7`).
pub const RELABEL_SEED: u64 = 7;

/// The collectives the zoo runs by default.
const ZOO_COLLECTIVES: &str = "allgather,reducescatter,allreduce";

/// Runs the zoo and prints a markdown table (or `--json`).
pub fn zoo(args: &BenchArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let fabrics = selected(args.fabrics.as_deref())?;
    let colls: Vec<&str> = args
        .coll
        .as_deref()
        .unwrap_or(ZOO_COLLECTIVES)
        .split(',')
        .map(str::trim)
        .collect();
    let exe = std::env::current_exe()?;
    let scratch = scratch_dir("zoo")?;
    let dir = scratch.path();
    // A bad collective is one error up front, not a table of failed rows.
    for coll in &colls {
        super::synth_cmd::load_collective(coll, &crate::topology::load("ring:4")?, None)?;
    }
    if !json {
        writeln!(out, "| fabric | collective | ranks | wall s | CPU s | peak MB | busbw 1 GB | % of optimum | optimum | renumbered: busbw, % of optimum, CPU s | twin apart | NCCL 1 GB | algorithm |")?;
        writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    }
    let mut rows = Vec::new();
    for (label, text) in &fabrics {
        let plain = dir.join(format!("{}.toml", file_stem(label)));
        let twin = dir.join(format!("{}-relabel{RELABEL_SEED}.toml", file_stem(label)));
        std::fs::write(&plain, text)?;
        std::fs::write(&twin, format!("relabel = {RELABEL_SEED}\n{text}"))?;
        let ranks = crate::topology::load(&plain.to_string_lossy())?.ranks;
        for coll in &colls {
            let a = run_one(&exe, &plain, coll, args.time_limit, dir)?;
            let b = run_one(&exe, &twin, coll, args.time_limit, dir)?;
            if !json {
                writeln!(out, "{}", row(label, coll, ranks, &a, &b))?;
            }
            rows.push(json!({"fabric": label, "toml": text, "collective": coll, "result": a, "renumbered": b}));
        }
    }
    drop(scratch);
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(())
}

/// The zoo fabrics named in `--fabrics` (all by default); an error names an unknown one.
fn selected(names: Option<&str>) -> Result<Vec<(&'static str, &'static str)>> {
    let Some(names) = names else {
        return Ok(ZOO.to_vec());
    };
    names
        .split(',')
        .map(str::trim)
        .map(|name| match ZOO.iter().find(|(label, _)| *label == name) {
            Some(f) => Ok(*f),
            None => {
                let known: Vec<&str> = ZOO.iter().map(|f| f.0).collect();
                bail!(
                    "--fabrics: '{name}' is not in the zoo ({})",
                    known.join(", ")
                )
            }
        })
        .collect()
}

/// A file name for a fabric label (`:` is not portable in file names).
fn file_stem(label: &str) -> String {
    label.replace(':', "_")
}

/// The main command's JSON document for one run, or `{"error": last line of stderr}`.
fn run_one(exe: &Path, fabric: &Path, coll: &str, time_limit: f64, dir: &Path) -> Result<Value> {
    let fabric = fabric.to_string_lossy();
    let child = run_main_command(exe, &fabric, coll, time_limit, dir)?;
    if !child.status.success() {
        let err = String::from_utf8_lossy(&child.stderr);
        let line = err.lines().last().unwrap_or("failed").to_string();
        return Ok(json!({ "error": line }));
    }
    Ok(serde_json::from_slice(&child.stdout)?)
}

/// Busbw at 1 GB and its share of the optimum of a run's document.
fn rated(doc: &Value) -> Option<(f64, f64, f64)> {
    let at = &doc["at_1gb"];
    let busbw = at["busbw"].as_f64()?;
    let optimum = at[optimum_key(at)].as_f64().filter(|&o| o > 0.0)?;
    Some((busbw, 100.0 * busbw / optimum, optimum))
}

/// The table row of one fabric and collective: the run as written and its renumbered twin.
fn row(label: &str, coll: &str, ranks: usize, a: &Value, b: &Value) -> String {
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
    if let Some(e) = a["error"].as_str() {
        return format!("| {label} | {coll} | | | | | | | | | | | {e} |");
    }
    let (busbw, pct, optimum) = match rated(a) {
        Some((x, p, o)) => (format!("{x:.1}"), format!("{p:.2}%"), format!("{o:.1}")),
        None => ("-".into(), "-".into(), "-".into()),
    };
    let (twin, apart) = match (rated(a), rated(b), b["error"].as_str()) {
        (_, _, Some(e)) => (e.to_string(), "-".into()),
        (Some((x, ..)), Some((y, q, _)), None) => (
            format!("{y:.1}, {q:.2}%, {}", f(&b["resources"]["cpu_seconds"])),
            format!("{:.2}%", 100.0 * (y - x).abs() / x.max(y)),
        ),
        _ => ("-".into(), "-".into()),
    };
    let name = a["algorithms"][0]["file"]
        .as_str()
        .and_then(|p| Path::new(p).file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(
        "| {label} | {coll} | {ranks} | {} | {} | {} | {busbw} | {pct} | {optimum} | {twin} | {apart} | {} | {name} |",
        f(&a["seconds"]),
        f(&a["resources"]["cpu_seconds"]),
        f(&a["resources"]["peak_rss_mb"]),
        nccl_best(&a["at_1gb"]).map_or("-".into(), |x| format!("{x:.1}")),
    )
}
