//! `synth fuse`'s workload file (TOML) and the comparison of its schedules by simulation.
//!
//! ```toml
//! collective = "allreduce"
//! size = "1GB"                 # nccl-tests' size of the buffer
//! dtype = "f32"                # f32, f64, f16 or bf16
//! epilogue = "adam"            # adam, sgd, bias-dropout-residual, or statements
//! memory_bandwidth = 1500.0    # GB/s of the GPU's memory, which the compute streams through
//! launch_us = 5.0              # a separate kernel's launch cost (default 5)
//! seed = 1                     # dropout mask seed (default 0)
//! [scalars]                    # per-step scalars (override the epilogue's defaults)
//! lr = 0.001
//! [producer]                   # optional: a producer writing the input in tiles
//! tiles = 16
//! time_us = 2000.0
//! ```

use super::{compose, plain, Placement};
use crate::simulate::{self, Producer, SimOptions};
use crate::topology::Topology;
use anyhow::{Context, Result};
use runtime::compute::{self, Compute, ComputeError};
use runtime::cpu::DataType;
use runtime::ir::Program;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A workload: an allreduce of `size` bytes followed by an elementwise computation.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// nccl-tests' size (bytes of the buffer).
    pub size: u64,
    /// Element type.
    pub dtype: DataType,
    /// The computation after the allreduce.
    pub compute: Compute,
    /// The GPU memory's bandwidth in GB/s (the compute streams through it; copies get half).
    pub memory_bandwidth: f64,
    /// A separate kernel's launch cost in µs (the plain schedule's compute).
    pub launch_us: f64,
    /// A producer of the input, if any.
    pub producer: Option<Producer>,
}

/// Why a workload file does not read: a one-line message naming the line or the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// The TOML does not parse, or a field has the wrong type or is unknown.
    #[error("line {line}: {message}")]
    Toml {
        /// 1-based line.
        line: usize,
        /// The parser's message, one line.
        message: String,
    },
    /// A field is missing or its value is out of range.
    #[error("field {field}: {message}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The epilogue's statements do not parse.
    #[error("field epilogue: {0}")]
    Epilogue(#[from] ComputeError),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    collective: Option<String>,
    size: Option<toml::Value>,
    dtype: Option<String>,
    epilogue: Option<String>,
    memory_bandwidth: Option<f64>,
    launch_us: Option<f64>,
    seed: Option<u64>,
    scalars: Option<BTreeMap<String, f64>>,
    producer: Option<RawProducer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProducer {
    tiles: i64,
    time_us: f64,
}

impl Workload {
    /// Reads a workload from TOML text.
    pub fn parse(text: &str) -> Result<Workload, WorkloadError> {
        let raw: Raw = toml::from_str(text).map_err(|e| WorkloadError::Toml {
            line: e.span().map_or(1, |s| {
                text[..s.start.min(text.len())].matches('\n').count() + 1
            }),
            message: e.message().replace(['\n', '\r'], " "),
        })?;
        let field = |field: &'static str, message: String| WorkloadError::Field { field, message };
        match raw.collective.as_deref() {
            Some("allreduce") => {}
            Some(other) => {
                return Err(field(
                    "collective",
                    format!("{other:?}: only \"allreduce\" has a compute to fuse"),
                ))
            }
            None => return Err(field("collective", "missing (\"allreduce\")".into())),
        }
        let size = match &raw.size {
            Some(toml::Value::String(s)) => {
                runtime::cpu::parse_size(s).map_err(|e| field("size", format!("{e:#}")))?
            }
            Some(toml::Value::Integer(b)) if *b > 0 => *b as u64,
            Some(v) => return Err(field("size", format!("{v}: a positive size like \"1GB\""))),
            None => return Err(field("size", "missing (e.g. \"1GB\")".into())),
        };
        if size == 0 {
            return Err(field("size", "must be positive".into()));
        }
        let dtype = match raw.dtype.as_deref().unwrap_or("f32") {
            "f32" => DataType::F32,
            "f64" => DataType::F64,
            "f16" => DataType::F16,
            "bf16" => DataType::BF16,
            other => {
                return Err(field(
                    "dtype",
                    format!("{other:?}: one of f32, f64, f16, bf16"),
                ))
            }
        };
        let Some(epilogue) = raw.epilogue else {
            return Err(field(
                "epilogue",
                "missing (adam, sgd, bias-dropout-residual, or statements ending in `out = ...`)"
                    .into(),
            ));
        };
        let Some((program, mut scalars)) = compute::epilogue(&epilogue) else {
            return Err(field(
                "epilogue",
                format!("{epilogue:?}: not adam, sgd, bias-dropout-residual, nor statements ending in `out = ...`"),
            ));
        };
        for (k, v) in raw.scalars.unwrap_or_default() {
            scalars.insert(k, v);
        }
        let compute = Compute {
            program,
            scalars,
            seed: raw.seed.unwrap_or(0),
        };
        compute.kernel()?;
        let memory_bandwidth = raw
            .memory_bandwidth
            .ok_or_else(|| field("memory_bandwidth", "missing (GB/s, e.g. 1500)".into()))?;
        if !(memory_bandwidth.is_finite() && memory_bandwidth > 0.0) {
            return Err(field(
                "memory_bandwidth",
                format!("{memory_bandwidth}: must be a positive number of GB/s"),
            ));
        }
        let launch_us = raw.launch_us.unwrap_or(5.0);
        if !(launch_us.is_finite() && launch_us >= 0.0) {
            return Err(field(
                "launch_us",
                format!("{launch_us}: must be a non-negative number of µs"),
            ));
        }
        let producer = match raw.producer {
            None => None,
            Some(p) => {
                if p.tiles < 1 || p.tiles > 1 << 20 {
                    return Err(field(
                        "producer.tiles",
                        format!("{}: must be 1 to 1048576", p.tiles),
                    ));
                }
                if !(p.time_us.is_finite() && p.time_us > 0.0) {
                    return Err(field(
                        "producer.time_us",
                        format!("{}: must be a positive number of µs", p.time_us),
                    ));
                }
                Some(Producer {
                    tiles: p.tiles as usize,
                    time_us: p.time_us,
                })
            }
        };
        Ok(Workload {
            size,
            dtype,
            compute,
            memory_bandwidth,
            launch_us,
            producer,
        })
    }
}

/// One schedule's simulated time next to its bounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// `allreduce` (no compute, the reference), `allreduce-then-compute`, `rs-compute-ag`
    /// or `fused`.
    pub schedule: &'static str,
    /// Whether the producer overlaps the collective (false: it runs first).
    pub overlap: bool,
    /// Simulated time, µs (the producer's time first where it does not overlap; for the
    /// plain schedule the simulated allreduce plus the compute kernel after it).
    pub time_us: f64,
    /// The compute's time on one rank (bytes over memory bandwidth, plus the launch for a
    /// separate kernel), µs.
    pub compute_us: f64,
    /// max(T_producer, T_comm, T_compute): the time were they all overlapped.
    pub max_us: f64,
    /// T_producer + T_comm + T_compute: the time run one after the other.
    pub sum_us: f64,
    /// The program's name.
    pub program: String,
}

/// The schedules of a workload on a fabric.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The allreduce alone (the pair composed), simulated, µs.
    pub comm_us: f64,
    /// The producer's time, µs (0 without one).
    pub producer_us: f64,
    /// Every schedule considered.
    pub rows: Vec<Row>,
    /// Index of the fastest row with a compute.
    pub best: usize,
    /// Its program.
    #[serde(skip)]
    pub best_program: Program,
}

/// Builds, verifies and simulates every schedule of `w` over the pair `rs`, `ag` on `topo`.
pub fn compare(w: &Workload, rs: &Program, ag: &Program, topo: &Topology) -> Result<Comparison> {
    let allreduce = compose(rs, ag, &w.compute, Placement::None)?;
    let programs = [
        ("allreduce", allreduce.clone()),
        ("allreduce-then-compute", plain(&allreduce, &w.compute)),
        (
            "rs-compute-ag",
            compose(rs, ag, &w.compute, Placement::Split)?,
        ),
        ("fused", compose(rs, ag, &w.compute, Placement::Fused)?),
    ];
    let n = allreduce.ngpus as f64;
    let streams = w.compute.kernel()?.streams() as f64;
    let bytes = simulate::elements_for(w.size, allreduce.nchunksperloop) * simulate::ELEMENT_BYTES;
    let whole_us = bytes as f64 * streams / (w.memory_bandwidth * 1e3);
    let mut base = SimOptions::default();
    base.model.local_bandwidth = w.memory_bandwidth / 2.0;
    let producer_us = w.producer.map_or(0.0, |p| p.time_us);
    let overlaps: &[bool] = if w.producer.is_some() {
        &[false, true]
    } else {
        &[false]
    };
    let mut rows = Vec::new();
    let mut comm_us = 0.0;
    // The allreduce's simulated time, without and with the producer's overlap.
    let mut allreduce_us = [0.0; 2];
    let mut best: Option<(usize, Program)> = None;
    for (schedule, p) in programs {
        runtime::verify::verify(&p).with_context(|| format!("{schedule}: {}", p.name))?;
        let compute_us = match schedule {
            "allreduce" => 0.0,
            "allreduce-then-compute" => whole_us + w.launch_us,
            _ => whole_us / n,
        };
        for &overlap in overlaps {
            let opts = match w.producer.filter(|_| overlap) {
                Some(producer) => SimOptions {
                    producer: Some(producer),
                    slicing: simulate::Slicing::Producer,
                    ..base
                },
                None => base,
            };
            // The plain schedule is two kernels: the allreduce, then the compute.
            let time_us = if schedule == "allreduce-then-compute" {
                allreduce_us[overlap as usize] + compute_us
            } else {
                simulate::simulate(&p, topo, w.size, &opts)
                    .with_context(|| format!("simulating {schedule}"))?
                    .time_us
            };
            if schedule == "allreduce" {
                allreduce_us[overlap as usize] = time_us;
                if !overlap {
                    comm_us = time_us;
                }
            }
            let before = if overlap { 0.0 } else { producer_us };
            rows.push(Row {
                schedule,
                overlap,
                time_us: before + time_us,
                compute_us,
                max_us: producer_us.max(comm_us).max(compute_us),
                sum_us: producer_us + comm_us + compute_us,
                program: p.name.clone(),
            });
            let i = rows.len() - 1;
            let better = best
                .as_ref()
                .is_none_or(|(b, _)| rows[i].time_us < rows[*b].time_us);
            if schedule != "allreduce" && better {
                best = Some((i, p.clone()));
            }
        }
    }
    let (best, best_program) = best.expect("three schedules with a compute");
    Ok(Comparison {
        comm_us,
        producer_us,
        rows,
        best,
        best_program,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "collective = \"allreduce\"\nsize = \"1GB\"\ndtype = \"f32\"\nepilogue = \"adam\"\nmemory_bandwidth = 1500\n";

    #[test]
    fn a_good_workload_reads_with_its_preset_scalars() {
        let w = Workload::parse(GOOD).unwrap();
        assert_eq!(w.size, 1 << 30);
        assert_eq!(w.compute.scalars["beta1"], 0.9);
        assert_eq!(w.launch_us, 5.0);
        let with = format!("{GOOD}[scalars]\nlr = 0.5\n[producer]\ntiles = 16\ntime_us = 100\n");
        let w = Workload::parse(&with).unwrap();
        assert_eq!(w.compute.scalars["lr"], 0.5);
        assert_eq!(w.producer.unwrap().tiles, 16);
    }

    /// Twenty malformed workloads and expressions: each a one-line error naming its line or
    /// field (the variant checked too).
    #[test]
    fn malformed_workloads_are_one_line_errors() {
        let g = |from: &str, to: &str| GOOD.replace(from, to);
        let cases: Vec<(String, &str)> = vec![
            (g("allreduce", "allgather"), "field collective"),
            (
                GOOD.replace("collective = \"allreduce\"\n", ""),
                "field collective",
            ),
            (g("\"1GB\"", "\"1QB\""), "field size"),
            (g("\"1GB\"", "0"), "field size"),
            (g("\"1GB\"", "true"), "field size"),
            (GOOD.replace("size = \"1GB\"\n", ""), "field size"),
            (g("f32", "f8"), "field dtype"),
            (GOOD.replace("epilogue = \"adam\"\n", ""), "field epilogue"),
            (g("\"adam\"", "\"adamw\""), "field epilogue"),
            (g("\"adam\"", "\"out = x +\""), "field epilogue"),
            (g("\"adam\"", "\"out = sqr(x)\""), "field epilogue"),
            (g("\"adam\"", "\"x = 2; out = x\""), "field epilogue"),
            (g("\"adam\"", "\"out = (x\""), "field epilogue"),
            (g("1500", "0"), "field memory_bandwidth"),
            (g("1500", "\"fast\""), "line 5"),
            (
                GOOD.replace("memory_bandwidth = 1500\n", ""),
                "field memory_bandwidth",
            ),
            (format!("{GOOD}launch_us = -1\n"), "field launch_us"),
            (format!("{GOOD}colour = 3\n"), "line 6"),
            (
                format!("{GOOD}[producer]\ntiles = 0\ntime_us = 5\n"),
                "field producer.tiles",
            ),
            (
                format!("{GOOD}[producer]\ntiles = 4\ntime_us = -5\n"),
                "field producer.time_us",
            ),
            (format!("{GOOD}[producer]\ntiles = 4\n"), "line 6"),
            (format!("{GOOD}size = \"2GB\"\n"), "line 6"),
            ("collective = \n".to_string(), "line 1"),
        ];
        assert!(cases.len() >= 20);
        for (text, want) in cases {
            let e = Workload::parse(&text).unwrap_err();
            let line = e.to_string();
            assert!(line.contains(want), "{text:?}: {line}");
            assert!(!line.contains('\n') && line.len() <= 300, "{line}");
            let typed = match e {
                WorkloadError::Toml { .. } => want.starts_with("line"),
                WorkloadError::Field { field, .. } => want == format!("field {field}"),
                WorkloadError::Epilogue(_) => want == "field epilogue",
            };
            assert!(typed, "{text:?}: {line}");
        }
    }
}
