//! Size sweeps of the CPU executor, reported like nccl-tests.

use super::{elements_for, run_verified, DataType, ReduceOp, RunOptions};
use crate::ir::Program;
use crate::verify::{verify_with, VerifyOptions};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// What to sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepOptions {
    /// Message sizes in bytes (nccl-tests' size: the larger buffer).
    pub sizes: Vec<u64>,
    /// Run out of place (if the program allows it).
    pub outofplace: bool,
    /// Run in place (if the program allows it).
    pub inplace: bool,
    /// Everything else (element type, operator, iterations, ...); `elements` and `inplace`
    /// are set per row.
    pub run: RunOptions,
}

impl Default for SweepOptions {
    fn default() -> Self {
        SweepOptions {
            sizes: vec![1 << 20],
            outofplace: true,
            inplace: true,
            run: RunOptions::default(),
        }
    }
}

/// One measured (size, mode) point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    /// Bytes of the larger buffer.
    pub size: u64,
    /// Elements of the larger buffer.
    pub count: usize,
    /// Element type name.
    pub dtype: String,
    /// Reduction operator name ("none" for collectives that do not reduce).
    pub redop: String,
    /// Root rank, or -1.
    pub root: i64,
    /// In place or out of place.
    pub inplace: bool,
    /// Average time of one run, microseconds.
    pub time_us: f64,
    /// size / time, GB/s (1e9 bytes).
    pub algbw: f64,
    /// algbw × the collective's bus factor, GB/s.
    pub busbw: f64,
    /// Elements that differ from the reference.
    pub wrong: usize,
}

/// What one run of a sweep was: its size, element type, operator and mode.
pub struct RunPoint<'a> {
    /// Elements of the larger buffer.
    pub elements: usize,
    /// Bytes of the larger buffer.
    pub bytes: u64,
    /// Element type name.
    pub dtype: &'a str,
    /// Reduction operator name (shown only for collectives that reduce).
    pub op: &'a str,
    /// In place or out of place.
    pub inplace: bool,
}

impl SweepRow {
    /// The nccl-tests row of one run of `p`: redop "none" for collectives that do not reduce,
    /// root -1 for unrooted ones, algbw = size / time and busbw = algbw × the bus factor.
    pub fn new(p: &Program, point: &RunPoint, time_us: f64, wrong: usize) -> SweepRow {
        let algbw = point.bytes as f64 / (time_us * 1e3);
        SweepRow {
            size: point.bytes,
            count: point.elements,
            dtype: point.dtype.to_string(),
            redop: if p.collective.is_reduction() || p.custom.as_ref().is_some_and(|c| c.reduces())
            {
                point.op.to_string()
            } else {
                "none".to_string()
            },
            root: if p.collective.is_rooted() {
                p.root as i64
            } else {
                -1
            },
            inplace: point.inplace,
            time_us,
            algbw,
            busbw: algbw * p.collective.busbw_factor(p.ngpus),
            wrong,
        }
    }
}

/// The modes a sweep runs (false: out of place, true: in place): those requested that the
/// program allows; an error when none is left.
pub fn sweep_modes(p: &Program, outofplace: bool, inplace: bool) -> Result<Vec<bool>> {
    let modes: Vec<bool> = [
        (false, outofplace && p.outofplace),
        (true, inplace && p.inplace),
    ]
    .into_iter()
    .filter(|(_, on)| *on)
    .map(|(m, _)| m)
    .collect();
    if modes.is_empty() {
        bail!("no requested mode is valid for program {}", p.name);
    }
    Ok(modes)
}

/// Verifies the program once, then runs it at every size in every requested mode it allows.
pub fn sweep(p: &Program, opts: &SweepOptions) -> Result<Vec<SweepRow>> {
    verify_with(
        p,
        &VerifyOptions {
            fifo_depth: opts.run.fifo_depth.max(1),
        },
    )
    .context("the program does not verify")?;
    let modes = sweep_modes(p, opts.outofplace, opts.inplace)?;
    let mut rows = Vec::new();
    for &size in &opts.sizes {
        let elements = elements_for(p, size, opts.run.dtype.size());
        for &inplace in &modes {
            let run = RunOptions {
                elements,
                inplace,
                ..opts.run.clone()
            };
            let r = run_verified(p, &run)?;
            let point = RunPoint {
                elements: r.elements,
                bytes: r.bytes,
                dtype: r.dtype.name(),
                op: r.op.name(),
                inplace,
            };
            rows.push(SweepRow::new(p, &point, r.time_us, r.wrong));
        }
    }
    Ok(rows)
}

/// Formats rows as nccl-tests' table: one line per size with out-of-place and in-place
/// columns (`N/A` where a mode was not run).
pub fn format_table(rows: &[SweepRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "#{:>64}{:>32}", "out-of-place", "in-place");
    let _ = writeln!(
        out,
        "#{:>11} {:>12} {:>8} {:>6} {:>6} {:>9} {:>7} {:>7} {:>6} {:>9} {:>7} {:>7} {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    let _ = writeln!(
        out,
        "#{:>11} {:>12} {:>8} {:>6} {:>6} {:>9} {:>7} {:>7} {:>6} {:>9} {:>7} {:>7} {:>6}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    );
    for group in rows_by_size(rows) {
        let first = group[0];
        let cell = |inplace: bool| match group.iter().find(|r| r.inplace == inplace) {
            Some(r) => format!(
                "{:>9.2} {:>7.2} {:>7.2} {:>6}",
                r.time_us, r.algbw, r.busbw, r.wrong
            ),
            None => format!("{:>9} {:>7} {:>7} {:>6}", "N/A", "N/A", "N/A", "N/A"),
        };
        let _ = writeln!(
            out,
            " {:>11} {:>12} {:>8} {:>6} {:>6} {} {}",
            first.size,
            first.count,
            first.dtype,
            first.redop,
            first.root,
            cell(false),
            cell(true)
        );
    }
    out
}

/// Consecutive rows of one size and type (the out-of-place and in-place runs of one table
/// line), in order.
pub fn rows_by_size(rows: &[SweepRow]) -> Vec<Vec<&SweepRow>> {
    let mut groups: Vec<Vec<&SweepRow>> = Vec::new();
    for row in rows {
        match groups.last_mut() {
            Some(g) if g[0].size == row.size && g[0].dtype == row.dtype => g.push(row),
            _ => groups.push(vec![row]),
        }
    }
    groups
}

/// Parses one message size in bytes, the one size syntax of every command (`synth run`,
/// `simulate`, `catalog`, sketches): a number with an optional unit `K`, `M`, `G`, `T`
/// (`KB`/`KiB`, `MB`/`MiB`, ... mean the same, case-insensitive), all binary as in
/// nccl-tests: `1K` = `1KB` = `1KiB` = 1024 bytes. A decimal (`1.5K`) must come to whole
/// bytes; 0 bytes and sizes above [`MAX_SIZE`] are errors.
pub fn parse_size(s: &str) -> Result<u64> {
    let bytes = parse_bytes(s)?;
    if bytes > MAX_SIZE {
        bail!("size {s:?} is above the limit of 1024T (2^50 bytes)");
    }
    Ok(bytes)
}

/// Largest message size a command line or sketch may name: 1024T (2^50 bytes), far past any
/// GPU's memory, so sizes stay exact in `f64` and their ranges short.
pub const MAX_SIZE: u64 = 1 << 50;

/// [`parse_size`] without the limit.
fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => bail!(
            "bad size {s:?} (a number of bytes with an optional unit K, M, G or T; 1K = 1024)"
        ),
    };
    let bytes = if num.contains('.') {
        let v: f64 = num
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .with_context(|| format!("bad size {s:?}"))?;
        let b = v * (1u64 << shift) as f64;
        if b.fract() != 0.0 {
            bail!("size {s:?} is not a whole number of bytes");
        }
        if b >= u64::MAX as f64 {
            bail!("size {s:?} overflows");
        }
        b as u64
    } else {
        let v: u64 = num.parse().with_context(|| format!("bad size {s:?}"))?;
        v.checked_mul(1 << shift)
            .with_context(|| format!("size {s:?} overflows"))?
    };
    if bytes == 0 {
        bail!("size {s:?} is 0 bytes: a message needs at least 1 byte");
    }
    Ok(bytes)
}

/// Parses `MIN:MAX[:FACTOR]` (sizes multiplied by FACTOR, default 2, from MIN up to MAX) or
/// a single size such as `64M`.
pub fn parse_sizes(spec: &str) -> Result<Vec<u64>> {
    let parts: Vec<&str> = spec.split(':').collect();
    match parts.as_slice() {
        [one] => Ok(vec![parse_size(one)?]),
        [lo, hi] | [lo, hi, _] => {
            let (lo, hi) = (parse_size(lo)?, parse_size(hi)?);
            let factor: u64 = match parts.get(2) {
                Some(f) => f
                    .trim()
                    .parse()
                    .with_context(|| format!("bad factor in {spec:?}"))?,
                None => 2,
            };
            if lo > hi || factor < 2 {
                bail!("size range {spec:?} needs MIN <= MAX and FACTOR >= 2");
            }
            let mut sizes = Vec::new();
            let mut s = lo;
            while s <= hi {
                sizes.push(s);
                s = match s.checked_mul(factor) {
                    Some(v) => v,
                    None => break,
                };
            }
            Ok(sizes)
        }
        _ => bail!("bad size spec {spec:?}: use SIZE or MIN:MAX[:FACTOR]"),
    }
}

/// The element type and operator names accepted on command lines.
pub fn parse_dtype(s: &str) -> Option<DataType> {
    match s {
        "float" | "f32" => Some(DataType::F32),
        "double" | "f64" => Some(DataType::F64),
        "half" | "f16" => Some(DataType::F16),
        "bfloat16" | "bf16" => Some(DataType::BF16),
        _ => None,
    }
}

/// Parses a reduction operator name.
pub fn parse_op(s: &str) -> Option<ReduceOp> {
    match s {
        "sum" => Some(ReduceOp::Sum),
        "min" => Some(ReduceOp::Min),
        "max" => Some(ReduceOp::Max),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_sizes("64M").unwrap(), vec![64 << 20]);
        assert_eq!(parse_sizes("1K:8K").unwrap(), vec![1024, 2048, 4096, 8192]);
        assert_eq!(parse_sizes("1K:1M:32").unwrap(), vec![1024, 32768, 1 << 20]);
        assert_eq!(parse_sizes("1K:256M").unwrap().len(), 19);
        assert!(parse_sizes("8K:1K").is_err());
        assert!(parse_sizes("x").is_err());
        assert!(parse_sizes("0").is_err());
        assert!(parse_sizes("0:1K").is_err());
        for one in ["1K", "1KB", "1kib", "1024", "1024B", "0.5K", "1 KiB"] {
            assert_eq!(
                parse_size(one).unwrap(),
                1024 >> u64::from(one == "0.5K"),
                "{one}"
            );
        }
        assert_eq!(parse_size("1.5M").unwrap(), 3 << 19);
        assert!(parse_size("0.3").is_err());
        assert!(parse_size("1X").is_err());
        assert_eq!(parse_size("1024T").unwrap(), MAX_SIZE);
        for big in ["1025T", "16777215T", "1024.5T", "18446744073709551615"] {
            let e = parse_size(big).unwrap_err().to_string();
            assert!(e.contains("above the limit of 1024T"), "{e}");
        }
        assert!(parse_sizes("1K:2000T").is_err());
        assert_eq!(parse_sizes("1:1024T").unwrap().len(), 51);
    }
}
