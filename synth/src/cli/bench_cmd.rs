//! `synth bench`: times fixed synthesis cases (the speed targets of the SMT search) and
//! reports every run, the minimum and the median.

use crate::collective::{Collective, Kind};
use crate::progress::Progress;
use crate::smt::Limits;
use crate::synthesize::{synthesize, Request, Search};
use crate::topology;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Arguments of `synth bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Cases to time: dgx1-allgather-pareto, dgx1-reducescatter-pareto,
    /// dgx1-alltoall-8-8-3, `scale` (the main command's default allgather on the scale
    /// fabrics, each in its own process: wall and CPU time, peak memory, simulated busbw
    /// against the exact optimum and NCCL ring), `zoo` (the same on fabrics like users',
    /// each also under a random renumbering of its ranks) or `small` (1 KB to 64 MB on the
    /// benchmark fabrics: synth's best algorithm and protocol against NCCL's choice)
    /// (comma-separated).
    #[arg(long, default_value = "dgx1-allgather-pareto,dgx1-alltoall-8-8-3")]
    cases: String,
    /// Runs per case.
    #[arg(long, default_value_t = 3, value_parser = super::limits::iterations)]
    repeat: usize,
    /// Time limit per run, seconds.
    #[arg(long, default_value_t = 900.0, allow_negative_numbers = true, value_parser = super::limits::seconds)]
    pub(super) time_limit: f64,
    /// With `--cases scale`: the fabrics (comma-separated; default: the ten of the scale
    /// issue); with `--cases zoo`: the zoo fabrics to run (default: all); with `--cases
    /// small`: any fabrics (default: dgx1, dgx-a100, dgx-h100, dgx-a100x2, dgx-a100x4,
    /// mi250-16, torus-2d:8x8).
    #[arg(long)]
    pub(super) fabrics: Option<String>,
    /// With `--cases scale`: the collective each fabric runs (default allgather); with
    /// `--cases zoo`: the collectives (comma-separated; default allgather, reducescatter,
    /// allreduce); with `--cases small`: the collectives (default allreduce, allgather,
    /// reducescatter, alltoall).
    #[arg(long)]
    pub(super) coll: Option<String>,
    #[command(flatten)]
    pub(super) model: super::model_args::ModelArgs,
}

/// Runs `synth bench`.
pub fn run(args: &BenchArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let mut report = Vec::new();
    if args.cases.split(',').any(|c| c.trim() == "scale") {
        return scale(args, json, out);
    }
    if args.cases.split(',').any(|c| c.trim() == "zoo") {
        return super::bench_zoo::zoo(args, json, out);
    }
    if args.cases.split(',').any(|c| c.trim() == "small") {
        return super::bench_small::small(args, json, out);
    }
    for case in args
        .cases
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        let (topo, kind, search) = match case {
            "dgx1-allgather-pareto" => ("dgx1", Kind::AllGather, Search::Pareto),
            "dgx1-reducescatter-pareto" => ("dgx1", Kind::ReduceScatter, Search::Pareto),
            "dgx1-alltoall-8-8-3" => (
                "dgx1",
                Kind::AllToAll,
                Search::Instance {
                    steps: 8,
                    rounds: 8,
                    chunks: 3,
                },
            ),
            other => bail!("unknown bench case `{other}`"),
        };
        let topology = topology::load(topo)?;
        let mut seconds = Vec::new();
        let mut outcome = String::new();
        for _ in 0..args.repeat {
            let started = Instant::now();
            let progress = Progress::hidden();
            let request = Request {
                topology: &topology,
                collective: Collective::new(kind, topology.ranks, 0, 1)?,
                search,
                limits: Limits {
                    max_steps: 16,
                    max_chunks: 8,
                    max_chunks_given: false,
                    deadline: started + Duration::from_secs_f64(args.time_limit),
                    extra_memory: None,
                    work_limit: None,
                },
                progress: &progress,
            };
            let s = synthesize(&request)?;
            seconds.push(started.elapsed().as_secs_f64());
            outcome = s
                .algorithms
                .iter()
                .map(|a| format!("({},{},{})", a.num_steps(), a.rounds(), a.chunks()))
                .collect::<Vec<_>>()
                .join(" ");
            if !s.complete {
                outcome.push_str(" PARTIAL");
            }
        }
        let mut sorted = seconds.clone();
        sorted.sort_by(f64::total_cmp);
        let (min, median) = (sorted[0], sorted[sorted.len() / 2]);
        if !json {
            writeln!(out, "{case:<28} min {min:>8.2} s  median {median:>8.2} s  runs {seconds:.2?}  -> {outcome}")?;
        }
        report.push(json!({"case": case, "seconds": seconds, "min": min, "median": median, "result": outcome}));
    }
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

/// The fabrics of `synth bench --cases scale`.
const SCALE_FABRICS: [&str; 10] = [
    "torus-2d:4x4",
    "torus-2d:8x8",
    "torus-2d:16x16",
    "torus-2d:32x32",
    "dgx-a100x2",
    "dgx-a100x4",
    "dgx-a100x8",
    "dgx-h100x4",
    "mi250-16",
    "mi250-16x2",
];

/// `synth bench --cases scale [--fabrics ..] [--coll C]`: runs the main command (default
/// method; allgather unless `--coll`) once per fabric in a child process and prints a
/// markdown table: resources, busbw at 1 GB against the optimum and NCCL, and the best busbw
/// at 1 KB, 64 KB and 1 MB against NCCL's best of ring, tree and point-to-point ("LOSES"
/// where it is slower).
fn scale(args: &BenchArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let exe = std::env::current_exe()?;
    let scratch = scratch_dir("scale")?;
    let dir = scratch.path();
    let fabrics: Vec<String> = match &args.fabrics {
        Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
        None => SCALE_FABRICS.iter().map(|s| s.to_string()).collect(),
    };
    // A bad fabric or collective is one error up front, not a table of failed rows.
    let coll = args.coll.as_deref().unwrap_or("allgather");
    for fabric in &fabrics {
        super::synth_cmd::load_collective(coll, &topology::load(fabric)?, None)?;
    }
    let mut rows = Vec::new();
    if !json {
        writeln!(out, "| fabric | ranks | wall s | CPU s | peak MB | busbw 1 GB | % of optimum | optimum | NCCL 1 GB | 1 KB best / NCCL | 64 KB best / NCCL | 1 MB best / NCCL | algorithm |")?;
        writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    }
    for fabric in &fabrics {
        let child = run_main_command(&exe, fabric, coll, args.time_limit, dir)?;
        if !child.status.success() {
            let err = String::from_utf8_lossy(&child.stderr);
            let line = err.lines().last().unwrap_or("failed").to_string();
            if !json {
                writeln!(out, "| {fabric} | | | | | | | | | | | | {line} |")?;
            }
            rows.push(json!({"fabric": fabric, "error": line}));
            continue;
        }
        let doc: serde_json::Value = serde_json::from_slice(&child.stdout)?;
        if !json {
            writeln!(out, "{}", scale_row(fabric, &doc))?;
        }
        rows.push(json!({"fabric": fabric, "result": doc}));
    }
    drop(scratch);
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(())
}

/// The scratch folder of one bench case, `synth-bench-CASE-PID` in the temporary directory;
/// it is removed when the returned guard drops, also on an error or a panic.
pub(super) fn scratch_dir(case: &str) -> Result<tempfile::TempDir> {
    let name = format!("synth-bench-{case}-{}", std::process::id());
    // A folder of this name can only be left by a killed run whose process id this one reuses.
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(&name));
    tempfile::Builder::new()
        .prefix(&name)
        .rand_bytes(0)
        .tempdir()
        .with_context(|| format!("creating {}", std::env::temp_dir().join(&name).display()))
}

/// Runs the main command (`exe`) on `fabric` with `--json`, collective `coll` and
/// `time_limit` seconds, writing to `dir`.
pub(super) fn run_main_command(
    exe: &Path,
    fabric: &str,
    coll: &str,
    time_limit: f64,
    dir: &Path,
) -> Result<std::process::Output> {
    Ok(std::process::Command::new(exe)
        .args(["--topo", fabric, "--coll", coll, "--json", "--time-limit"])
        .arg(time_limit.to_string())
        .arg("--out")
        .arg(dir)
        .output()?)
}

/// NCCL's busbw in a row of the main command's `at_1gb`: its choice (`nccl_busbw`), else
/// the largest of its ring, tree and point-to-point busbw (those present).
pub(super) fn nccl_best(row: &serde_json::Value) -> Option<f64> {
    if let Some(choice) = row["nccl_busbw"].as_f64() {
        return Some(choice);
    }
    [&row["ring"], &row["tree"], &row["p2p"]]
        .iter()
        .filter_map(|v| v.as_f64())
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
}

/// The best busbw at `bytes` against NCCL's best there (`LOSES` where slower), from the
/// main command's `at_1gb.sizes`.
fn best_against_nccl(at: &serde_json::Value, bytes: u64) -> String {
    let Some(row) = at["sizes"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["bytes"].as_u64() == Some(bytes)))
    else {
        return "-".into();
    };
    let g = |x: f64| format!("{x:.3}");
    match (row["busbw"].as_f64(), nccl_best(row)) {
        (Some(b), Some(n)) => format!(
            "{} / {}{}",
            g(b),
            g(n),
            if crate::select::loses(b, n) {
                " LOSES"
            } else {
                ""
            }
        ),
        (Some(b), None) => format!("{} / -", g(b)),
        _ => "-".into(),
    }
}

/// The key of the optimum a row of the main command's `at_1gb` is rated against: an
/// allreduce against reduce-scatter then allgather at their optima (what the issues' 98% is
/// of), not its cut bound, which no two-phase algorithm reaches; the rest against the bound.
pub(super) fn optimum_key(at: &serde_json::Value) -> &'static str {
    if at["two_phase"].is_f64() {
        "two_phase"
    } else {
        "bound"
    }
}

/// The table row of one fabric from the main command's JSON document.
fn scale_row(fabric: &str, doc: &serde_json::Value) -> String {
    let f = |v: &serde_json::Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
    let at = &doc["at_1gb"];
    let busbw = at["busbw"].as_f64();
    let optimum = &at[optimum_key(at)];
    let pct = match (busbw, optimum.as_f64()) {
        (Some(b), Some(o)) if o > 0.0 => format!("{:.1}%", 100.0 * b / o),
        _ => "-".into(),
    };
    let name = doc["algorithms"][0]["file"]
        .as_str()
        .and_then(|p| Path::new(p).file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(
        "| {fabric} | {} | {} | {} | {} | {} | {pct} | {} | {} | {} | {} | {} | {name} |",
        topology::load(fabric).map(|t| t.ranks).unwrap_or(0),
        f(&doc["seconds"]),
        f(&doc["resources"]["cpu_seconds"]),
        f(&doc["resources"]["peak_rss_mb"]),
        f(&at["busbw"]),
        f(optimum),
        nccl_best(at).map_or("-".into(), |x| format!("{x:.1}")),
        best_against_nccl(at, 1 << 10),
        best_against_nccl(at, 64 << 10),
        best_against_nccl(at, 1 << 20),
    )
}
