//! `msccl-run`: runs MSCCL XML programs (and the built-in ring/direct baselines) on the GPU
//! with the CUDA executor and prints nccl-tests' table; optionally writes markdown tables,
//! SVG plots and JSON to a folder. Needs only libcuda and NVRTC at run time (no z3, no HiGHS).

use anyhow::{bail, Context, Result};
use runtime::builders;
use runtime::cpu::{format_table, parse_sizes, SweepRow};
use runtime::cuda::report::{markdown_table, size_label, svg_plot, Series};
use runtime::cuda::{self, CudaOptions, Dtype};
use runtime::ir::Program;
use std::fmt::Write as _;
use std::path::PathBuf;

const USAGE: &str = "usage: msccl-run [options] PROGRAM...
  PROGRAM             an MSCCL XML file, a program JSON file, or a baseline
                      builtin:KIND:RANKS[:CHANNELS] with KIND one of ring-allreduce,
                      ring-allgather, ring-reducescatter, direct-alltoall, direct-allgather
  --sizes SPEC        MIN:MAX[:FACTOR] or one size (default 1K:1G)
  --dtype T           f32, f16 or bf16 (default f32)
  --iters N           timed graph replays per size, median reported (default 20)
  --warmup N          untimed replays first (default 5)
  --slices K          pieces per chunk, program replayed per piece (default 1)
  --seed S            input seed (default 1)
  --no-graph          issue streams directly instead of replaying a CUDA graph
  --single-gpu        every rank on GPU 0 even with more GPUs
  --no-check          skip the correctness check
  --ceiling           also time a plain device-to-device copy of each size
  --out-dir DIR       write DIR/summary.md, DIR/<program>.md, DIR/busbw.svg,
                      DIR/algbw.svg and DIR/results.json";

struct Args {
    programs: Vec<String>,
    opts: CudaOptions,
    ceiling: bool,
    out_dir: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        programs: Vec::new(),
        opts: CudaOptions {
            sizes: parse_sizes("1K:1G")?,
            ..CudaOptions::default()
        },
        ceiling: false,
        out_dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--sizes" | "--size" => a.opts.sizes = parse_sizes(&value(&arg)?)?,
            "--dtype" => {
                let v = value("--dtype")?;
                a.opts.dtype = Dtype::parse(&v).with_context(|| format!("unknown --dtype {v}"))?;
            }
            "--iters" => a.opts.iters = value("--iters")?.parse().context("--iters")?,
            "--warmup" => a.opts.warmup = value("--warmup")?.parse().context("--warmup")?,
            "--slices" => a.opts.slices = value("--slices")?.parse().context("--slices")?,
            "--seed" => a.opts.seed = value("--seed")?.parse().context("--seed")?,
            "--no-graph" => a.opts.graph = false,
            "--single-gpu" => a.opts.single_gpu = true,
            "--no-check" => a.opts.check = false,
            "--ceiling" => a.ceiling = true,
            "--out-dir" => a.out_dir = Some(PathBuf::from(value("--out-dir")?)),
            s if s.starts_with("--") => bail!("unknown option {s}\n{USAGE}"),
            _ => a.programs.push(arg),
        }
    }
    if a.programs.is_empty() && !a.ceiling {
        bail!("no program given\n{USAGE}");
    }
    Ok(a)
}

/// Reads a program file or builds a baseline.
fn load(spec: &str) -> Result<Program> {
    if let Some(rest) = spec.strip_prefix("builtin:") {
        let parts: Vec<&str> = rest.split(':').collect();
        let n: usize = parts
            .get(1)
            .context("builtin:KIND:RANKS")?
            .parse()
            .context("ranks")?;
        let ch: usize = parts.get(2).map(|c| c.parse()).transpose()?.unwrap_or(1);
        if n < 2 || ch < 1 {
            bail!("{spec}: needs at least 2 ranks and 1 channel");
        }
        let order: Vec<usize> = (0..n).collect();
        return Ok(match parts[0] {
            "ring-allreduce" => builders::ring_allreduce(&order, ch, false),
            "ring-allgather" => builders::ring_allgather(&order, ch, false),
            "ring-reducescatter" => builders::ring_reduce_scatter(&order, ch, false),
            "direct-alltoall" => builders::direct_alltoall(n),
            "direct-allgather" => builders::direct_allgather(n),
            k => bail!("unknown builtin {k}"),
        });
    }
    if spec.ends_with(".json") {
        let text = std::fs::read_to_string(spec).with_context(|| format!("{spec}: cannot read"))?;
        return Program::from_json(&text).map_err(|e| anyhow::anyhow!("{spec}: {e}"));
    }
    runtime::xml::read_file(spec).map_err(|e| anyhow::anyhow!("{spec}: {e}"))
}

fn stem(spec: &str) -> String {
    let base = spec.rsplit('/').next().unwrap_or(spec);
    let base = base
        .strip_suffix(".xml")
        .or(base.strip_suffix(".json"))
        .unwrap_or(base);
    base.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

struct Outcome {
    spec: String,
    program: Option<Program>,
    rows: Vec<SweepRow>,
    error: Option<String>,
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("msccl-run: {e:#}");
            std::process::exit(2);
        }
    };
    let info = match cuda::available() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("msccl-run: {e:#}");
            std::process::exit(3);
        }
    };
    println!(
        "# device: {} x{} (compute {}.{}), dtype {}, graph {}, slices {}",
        info.name,
        info.count,
        info.capability.0,
        info.capability.1,
        args.opts.dtype,
        args.opts.graph,
        args.opts.slices
    );
    let (ceiling, mut failed) = if args.ceiling {
        run_ceiling(&args)
    } else {
        (Vec::new(), false)
    };
    let mut outcomes = Vec::new();
    for spec in &args.programs {
        let out = run_program(spec, &args);
        failed |= report_failures(&out);
        outcomes.push(out);
    }
    if let Some(dir) = &args.out_dir {
        if let Err(e) = write_reports(dir, &args, &info, &ceiling, &outcomes) {
            eprintln!("msccl-run: writing reports: {e:#}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}

/// Times a plain device-to-device copy of each size and prints it; returns the rows and
/// whether it failed.
fn run_ceiling(args: &Args) -> (Vec<cuda::CeilingRow>, bool) {
    match cuda::copy_ceiling(&args.opts.sizes, args.opts.warmup, args.opts.iters) {
        Ok(rows) => {
            println!("# plain device-to-device copy on GPU 0 (ceiling)");
            println!("#{:>11} {:>10} {:>9}", "size (B)", "time (us)", "GB/s");
            for r in &rows {
                println!(" {:>11} {:>10.2} {:>9.2}", r.size, r.time_us, r.gbps);
            }
            (rows, false)
        }
        Err(e) => {
            eprintln!("msccl-run: copy ceiling: {e:#}");
            (Vec::new(), true)
        }
    }
}

/// Loads one program and runs it at every size, printing each size's table.
fn run_program(spec: &str, args: &Args) -> Outcome {
    let mut out = Outcome {
        spec: spec.to_string(),
        program: None,
        rows: Vec::new(),
        error: None,
    };
    match load(spec) {
        Err(e) => out.error = Some(format!("{e:#}")),
        Ok(p) => {
            println!(
                "# {} ({}): {} on {} ranks, {} threadblocks, {} steps",
                spec,
                p.name,
                p.collective,
                p.ngpus,
                p.threadblocks().count(),
                p.step_count()
            );
            // One size at a time, so that a size that does not fit still reports the rest.
            for &size in &args.opts.sizes {
                let opts = CudaOptions {
                    sizes: vec![size],
                    ..args.opts.clone()
                };
                match cuda::sweep(&p, &opts) {
                    Ok(rows) => {
                        print!("{}", format_table(&rows));
                        out.rows.extend(rows);
                    }
                    Err(e) => {
                        out.error = Some(format!("size {}: {e:#}", size_label(size)));
                        break;
                    }
                }
            }
            out.program = Some(p);
        }
    }
    out
}

/// Prints a program's error and wrong elements, if any; returns whether it failed.
fn report_failures(out: &Outcome) -> bool {
    let mut failed = false;
    if let Some(e) = &out.error {
        eprintln!("msccl-run: {}: {e}", out.spec);
        failed = true;
    }
    let wrong: usize = out.rows.iter().map(|r| r.wrong).sum();
    if wrong > 0 {
        eprintln!("msccl-run: {}: {wrong} wrong elements", out.spec);
        failed = true;
    }
    failed
}

/// Writes DIR/summary.md, DIR/<program>.md, the two plots and DIR/results.json.
fn write_reports(
    dir: &PathBuf,
    args: &Args,
    info: &cuda::DeviceInfo,
    ceiling: &[cuda::CeilingRow],
    outcomes: &[Outcome],
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let mut sum = summary_header(args, info, outcomes);
    write_ceiling_table(&mut sum, ceiling);
    let _ = writeln!(sum, "## Programs\n");
    for o in outcomes {
        write_program_report(dir, &mut sum, o)?;
    }
    std::fs::write(dir.join("summary.md"), sum)?;
    let title = format!("{} — {}", info.name, args.opts.dtype);
    std::fs::write(
        dir.join("busbw.svg"),
        svg_plot(
            &title,
            "busbw (GB/s)",
            &plot_series(outcomes, ceiling, true),
        ),
    )?;
    std::fs::write(
        dir.join("algbw.svg"),
        svg_plot(
            &title,
            "algbw (GB/s)",
            &plot_series(outcomes, ceiling, false),
        ),
    )?;
    let json = results_json(args, info, ceiling, outcomes);
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(())
}

/// The summary's title and the paragraph on the device and the options.
fn summary_header(args: &Args, info: &cuda::DeviceInfo, outcomes: &[Outcome]) -> String {
    let mode = if info.count
        >= outcomes
            .iter()
            .filter_map(|o| o.program.as_ref().map(|p| p.ngpus))
            .max()
            .unwrap_or(1)
        && !args.opts.single_gpu
    {
        "one GPU per rank"
    } else {
        "all ranks on GPU 0"
    };
    let mut sum = String::new();
    let _ = writeln!(sum, "# GPU benchmark\n");
    let _ = writeln!(
        sum,
        "Device: {} × {} (compute {}.{}); element type {}; {}; {} warm-up and {} timed replays \
         (median); CUDA graph: {}; slices per chunk: {}. Ranks map to GPUs as: {} (when a \
         program has more ranks than GPUs, all its ranks share GPU 0).\n",
        info.name,
        info.count,
        info.capability.0,
        info.capability.1,
        args.opts.dtype,
        if args.opts.check {
            "every size checked against the CPU reference (random inputs, NaN-poisoned outputs)"
        } else {
            "results not checked"
        },
        args.opts.warmup,
        args.opts.iters,
        args.opts.graph,
        args.opts.slices,
        mode
    );
    sum
}

/// The copy ceiling's table, when it was measured.
fn write_ceiling_table(sum: &mut String, ceiling: &[cuda::CeilingRow]) {
    if ceiling.is_empty() {
        return;
    }
    let _ = writeln!(sum, "## Ceiling: plain device-to-device copy on GPU 0\n");
    let _ = writeln!(sum, "| size | time (µs) | GB/s |\n|---:|---:|---:|");
    for r in ceiling {
        let _ = writeln!(
            sum,
            "| {} | {:.2} | {:.2} |",
            size_label(r.size),
            r.time_us,
            r.gbps
        );
    }
    sum.push('\n');
}

/// One program's section of the summary, and its own DIR/<program>.md.
fn write_program_report(dir: &std::path::Path, sum: &mut String, o: &Outcome) -> Result<()> {
    let title = match &o.program {
        Some(p) => format!(
            "{} — {} on {} ranks, {} steps",
            o.spec,
            p.collective,
            p.ngpus,
            p.step_count()
        ),
        None => o.spec.clone(),
    };
    let table = markdown_table(&o.rows);
    let _ = writeln!(sum, "### {title}\n");
    if let Some(e) = &o.error {
        let _ = writeln!(sum, "**error:** {}\n", e.replace('\n', " "));
    }
    if !o.rows.is_empty() {
        let _ = writeln!(sum, "{table}");
    }
    let mut one = format!("# {title}\n\n");
    if let Some(e) = &o.error {
        let _ = writeln!(one, "**error:** {}\n", e.replace('\n', " "));
    }
    one.push_str(&table);
    std::fs::write(dir.join(format!("{}.md", stem(&o.spec))), one)?;
    Ok(())
}

/// One plotted line per program that ran (its out-of-place rows where it has some), and
/// the copy ceiling: bus bandwidth, or algorithm bandwidth when `busbw` is false.
fn plot_series(outcomes: &[Outcome], ceiling: &[cuda::CeilingRow], busbw: bool) -> Vec<Series> {
    let mut v: Vec<Series> = outcomes
        .iter()
        .filter(|o| !o.rows.is_empty())
        .map(|o| {
            let oop = o.rows.iter().any(|r| !r.inplace);
            Series {
                name: format!("{}{}", stem(&o.spec), if oop { "" } else { " (ip)" }),
                points: o
                    .rows
                    .iter()
                    .filter(|r| r.inplace != oop)
                    .map(|r| (r.size, if busbw { r.busbw } else { r.algbw }))
                    .collect(),
            }
        })
        .collect();
    if !ceiling.is_empty() {
        v.push(Series {
            name: "d2d copy (ceiling)".into(),
            points: ceiling.iter().map(|r| (r.size, r.gbps)).collect(),
        });
    }
    v
}

/// Every result as one JSON document.
fn results_json(
    args: &Args,
    info: &cuda::DeviceInfo,
    ceiling: &[cuda::CeilingRow],
    outcomes: &[Outcome],
) -> serde_json::Value {
    serde_json::json!({
        "device": info.name,
        "devices": info.count,
        "dtype": args.opts.dtype.name(),
        "graph": args.opts.graph,
        "slices": args.opts.slices,
        "ceiling": ceiling.iter().map(|r| serde_json::json!({"size": r.size, "time_us": r.time_us, "gbps": r.gbps})).collect::<Vec<_>>(),
        "programs": outcomes.iter().map(|o| serde_json::json!({
            "spec": o.spec,
            "name": o.program.as_ref().map(|p| p.name.clone()),
            "error": o.error,
            "rows": o.rows,
        })).collect::<Vec<_>>(),
    })
}
