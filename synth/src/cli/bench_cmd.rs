//! `synth bench`: times fixed synthesis cases (the speed targets of the SMT search) and
//! reports every run, the minimum and the median.

use crate::collective::{Collective, Kind};
use crate::progress::Progress;
use crate::smt::Limits;
use crate::synthesize::{synthesize, Request, Search};
use crate::topology;
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use std::io::Write;
use std::time::{Duration, Instant};

/// Arguments of `synth bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Cases to time: dgx1-allgather-pareto, dgx1-reducescatter-pareto,
    /// dgx1-alltoall-8-8-3 (comma-separated).
    #[arg(long, default_value = "dgx1-allgather-pareto,dgx1-alltoall-8-8-3")]
    cases: String,
    /// Runs per case.
    #[arg(long, default_value_t = 3, value_parser = super::limits::iterations)]
    repeat: usize,
    /// Time limit per run, seconds.
    #[arg(long, default_value_t = 900.0, allow_negative_numbers = true, value_parser = super::limits::seconds)]
    time_limit: f64,
}

/// Runs `synth bench`.
pub fn run(args: &BenchArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let mut report = Vec::new();
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
        for _ in 0..args.repeat.max(1) {
            let started = Instant::now();
            let progress = Progress::hidden();
            let request = Request {
                topology: &topology,
                collective: Collective::new(kind, topology.ranks, 0, 1)?,
                search,
                limits: Limits {
                    max_steps: 16,
                    max_chunks: 8,
                    deadline: started + Duration::from_secs_f64(args.time_limit),
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
