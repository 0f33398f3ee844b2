//! Reading nccl-tests output (`sendrecv_perf`, `all_gather_perf`, `reduce_scatter_perf`,
//! `all_reduce_perf`, `broadcast_perf`, `reduce_perf`): which test, how many ranks on how
//! many hosts (the `#  Rank N ... on HOST` lines), and per size the out-of-place time.
//!
//! Columns are found by the header (`size ... time algbw busbw ...`), so the versions with
//! and without `redop`/`root` columns both read; times in `us` or `ms` (the units line);
//! `algbw` in GB (1e9 bytes) as nccl-tests prints it, or in GiB where a table's `algbw`
//! says so (recognised by comparing it with size / time).

use thiserror::Error;

/// What went wrong reading a table.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum TableError {
    /// A line the reader cannot use.
    #[error("line {line}: {reason}")]
    Line {
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The file as a whole.
    #[error("{0}")]
    File(String),
}

/// The nccl-tests binaries synth reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    /// `sendrecv_perf`: each rank sends the size to the next.
    SendRecv,
    /// `all_gather_perf` (size = the whole output).
    AllGather,
    /// `reduce_scatter_perf` (size = the whole input).
    ReduceScatter,
    /// `all_reduce_perf`.
    AllReduce,
    /// `broadcast_perf`.
    Broadcast,
    /// `reduce_perf`.
    Reduce,
}

impl Test {
    /// Recognises a test by the binary's name in `text` (`all_gather_perf`, `allgather`).
    pub fn from_name(text: &str) -> Option<Test> {
        let t = text.to_ascii_lowercase().replace(['_', '-'], "");
        [
            ("sendrecv", Test::SendRecv),
            ("allgather", Test::AllGather),
            ("reducescatter", Test::ReduceScatter),
            ("allreduce", Test::AllReduce),
            ("broadcast", Test::Broadcast),
            ("reduceperf", Test::Reduce),
        ]
        .iter()
        .find(|(k, _)| t.contains(k))
        .map(|&(_, test)| test)
    }

    /// The ring model's latency hops and bytes-on-the-bus factor on `n` ranks: time =
    /// `hops` x alpha + `factor` x size / bandwidth (`factor` is nccl-tests' busbw factor).
    pub fn ring_model(self, n: usize) -> (f64, f64) {
        let n = n.max(2) as f64;
        match self {
            Test::SendRecv => (1.0, 1.0),
            Test::AllGather | Test::ReduceScatter => (n - 1.0, (n - 1.0) / n),
            Test::AllReduce => (2.0 * (n - 1.0), 2.0 * (n - 1.0) / n),
            Test::Broadcast | Test::Reduce => (n - 1.0, 1.0),
        }
    }
}

/// One row: a size and its out-of-place time.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Row {
    /// Size in bytes as nccl-tests counts it.
    pub bytes: f64,
    /// Out-of-place time in µs.
    pub time_us: f64,
    /// 1-based line of the row.
    pub line: usize,
}

/// One nccl-tests table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Table {
    /// Which test.
    pub test: Test,
    /// Ranks (from the `Rank` lines).
    pub ranks: usize,
    /// Distinct hosts (0 where the table has no rank lines to tell).
    pub hosts: usize,
    /// Rows with a positive size and time (`bytes` as `algbw` counts them).
    pub rows: Vec<Row>,
    /// Whether `algbw` reads as GiB/s (2^30 bytes) rather than GB/s.
    pub gib: bool,
    /// Bytes `algbw` counts per byte of the `size` column (1, or 1/ranks in old
    /// single-process versions that printed the size over all GPUs).
    pub bytes_per_size: f64,
    /// How the rank count was found: `rank lines`, `busbw/algbw`, `nThread x nGpus`.
    pub ranks_from: &'static str,
}

/// Reads a table. `name_hint` (the file name) names the test where the text does not.
pub fn read(text: &str, name_hint: &str) -> Result<Table, TableError> {
    let mut test = None;
    let mut ranks = std::collections::BTreeSet::new();
    let mut hosts = std::collections::BTreeSet::new();
    let mut header: Option<Vec<String>> = None;
    let mut time_scale = 1.0;
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    let mut bus_ratios = Vec::new();
    let mut threads_gpus: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let no = i + 1;
        let line = raw.trim();
        let comment = line.strip_prefix('#').map(str::trim);
        // Logs copied without the '#' still read: these lines are known by their words.
        let words = comment.unwrap_or(line);
        let tokens: Vec<&str> = words.split_whitespace().collect();
        if let Some(name) = words.strip_prefix("Collective test starting:") {
            test = Test::from_name(name);
            continue;
        }
        if tokens.first() == Some(&"nThread") {
            let after = |key: &str| {
                let p = tokens.iter().position(|t| *t == key)?;
                tokens.get(p + 1)?.parse::<usize>().ok()
            };
            if let (Some(t), Some(g)) = (after("nThread"), after("nGpus")) {
                threads_gpus = Some(t.saturating_mul(g));
            }
            continue;
        }
        if tokens.first() == Some(&"Rank") {
            if let Some(r) = tokens.get(1).and_then(|r| r.parse::<usize>().ok()) {
                ranks.insert(r);
            }
            if let Some(h) = tokens
                .iter()
                .position(|t| *t == "on")
                .and_then(|p| tokens.get(p + 1))
            {
                hosts.insert(h.to_string());
            }
            continue;
        }
        if tokens.contains(&"size") && tokens.contains(&"time") && tokens.contains(&"algbw") {
            header = Some(tokens.iter().map(|t| t.to_string()).collect());
            continue;
        }
        if tokens.first() == Some(&"(B)") {
            if tokens.contains(&"(ms)") {
                time_scale = 1000.0;
            } else if tokens.contains(&"(s)") {
                time_scale = 1e6;
            }
            continue;
        }
        if comment.is_some() || tokens.is_empty() {
            continue;
        }
        let Some(h) = &header else { continue };
        let Some(first) = tokens.first() else {
            continue;
        };
        if first.parse::<u64>().is_err() {
            continue;
        }
        let col = |name: &str| h.iter().position(|c| c == name);
        let (Some(ci), Some(ti), Some(ai)) = (col("size"), col("time"), col("algbw")) else {
            continue;
        };
        let num = |idx: usize, what: &str| -> Result<f64, TableError> {
            let cell = tokens.get(idx).ok_or_else(|| TableError::Line {
                line: no,
                reason: format!("row has {} cells, the header {}", tokens.len(), h.len()),
            })?;
            cell.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| {
                    let shown: String = cell.chars().take(30).collect();
                    TableError::Line {
                        line: no,
                        reason: format!("{what} '{shown}' is not a number"),
                    }
                })
        };
        let bytes = num(ci, "size")?;
        let time_us = num(ti, "time")? * time_scale;
        let algbw = num(ai, "algbw")?;
        let busbw = match col("busbw") {
            Some(bi) => Some(num(bi, "busbw")?),
            None => None,
        };
        if bytes > 0.0 && time_us > 0.0 {
            rows.push(Row {
                bytes,
                time_us,
                line: no,
            });
            // GB/s computed from the row, for the convention check (large rows only:
            // small ones print 0.00).
            if algbw >= 1.0 {
                ratios.push(algbw / (bytes / time_us / 1e3));
                if let Some(b) = busbw {
                    bus_ratios.push(b / algbw);
                }
            }
        }
    }
    let test = test.or_else(|| Test::from_name(name_hint)).ok_or_else(|| {
        TableError::File(
            "cannot tell which nccl-tests binary wrote it: keep its '# Collective test starting' line or name the file after it (all_reduce_perf...)".to_string(),
        )
    })?;
    if header.is_none() {
        return Err(TableError::File(
            "no nccl-tests header row (# size count type ... time algbw busbw)".to_string(),
        ));
    }
    if rows.len() < 2 {
        return Err(TableError::File(format!(
            "{} rows with a positive size and time: a fit needs at least 2",
            rows.len()
        )));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let (ranks, ranks_from) = if !ranks.is_empty() {
        (ranks.len(), "rank lines")
    } else if let Some(n) = median(&mut bus_ratios).and_then(|f| ranks_from_busbw(test, f)) {
        (n, "busbw/algbw")
    } else if let Some(n) = threads_gpus.filter(|&n| n >= 2) {
        (n, "nThread x nGpus")
    } else {
        return Err(TableError::File(
            "no '#  Rank N ... on HOST device D' lines: keep nccl-tests' device list, which says how many ranks ran".to_string(),
        ));
    };
    // GB/s, GiB/s, or a size column counting other bytes than algbw does.
    let ratio = median(&mut ratios).unwrap_or(1.0);
    let gib_ratio = 1e9 / 1073741824.0;
    let (gib, bytes_per_size) = if (ratio - 1.0).abs() < 0.02 {
        (false, 1.0)
    } else if (ratio - gib_ratio).abs() < 0.02 {
        (true, 1.0)
    } else {
        (false, ratio)
    };
    for r in &mut rows {
        r.bytes *= bytes_per_size;
    }
    Ok(Table {
        test,
        ranks,
        hosts: hosts.len(),
        rows,
        gib,
        bytes_per_size,
        ranks_from,
    })
}

/// The rank count nccl-tests' busbw factor `f` (busbw / algbw) implies for `test`.
fn ranks_from_busbw(test: Test, f: f64) -> Option<usize> {
    let n = match test {
        Test::AllGather | Test::ReduceScatter if f < 0.999 => 1.0 / (1.0 - f),
        Test::AllReduce if f < 1.999 => 2.0 / (2.0 - f),
        _ => return None,
    };
    let r = n.round();
    ((n - r).abs() < 0.05 && r >= 2.0).then_some(r as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_header_forms() {
        let new = "# Collective test starting: all_gather_perf\n\
            #  Rank  0 Group  0 Pid 1 on nodeA device  0 [0x07] NVIDIA A100\n\
            #  Rank  1 Group  0 Pid 2 on nodeA device  1 [0x0f] NVIDIA A100\n\
            #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
            #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n\
                  1048576        131072     float    none      -1    20.00   52.43   26.21      0    19.00   55.19   27.59      0\n\
                  2097152        262144     float    none      -1    30.00   69.91   34.95      0    29.00   72.32   36.16      0\n";
        let t = read(new, "x.txt").unwrap();
        assert_eq!(
            (t.test, t.ranks, t.hosts, t.rows.len(), t.gib),
            (Test::AllGather, 2, 1, 2, false)
        );
        assert_eq!(t.rows[1].time_us, 30.0);
        assert_eq!(t.ranks_from, "rank lines");
        let old = "#   Rank  0 Pid 1 on a device  0 [0x00] Tesla V100\n\
            #   Rank  1 Pid 2 on b device  0 [0x00] Tesla V100\n\
            #       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n\
            #        (B)    (elements)                     (ms)  (GB/s)  (GB/s)            (ms)  (GB/s)  (GB/s)\n\
                  1048576        262144   float     sum    0.100   10.49   10.49  0e+00    0.100   10.49   10.49  0e+00\n\
                  2097152        524288   float     sum    0.180   11.65   11.65  0e+00    0.180   11.65   11.65  0e+00\n";
        let t = read(old, "results/all_reduce_perf-2n.txt").unwrap();
        assert_eq!((t.test, t.ranks, t.hosts), (Test::AllReduce, 2, 2));
        assert_eq!(t.rows[0].time_us, 100.0);
        let e = read(&old.replace("0.180   11.65", "fast   11.65"), "all_reduce").unwrap_err();
        assert!(e.to_string().starts_with("line 6: time 'fast'"), "{e}");
        assert!(read(old, "unknown.txt").is_err());
    }
}
