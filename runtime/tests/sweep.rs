//! Size sweeps: rows, nccl-tests table, JSON.

use runtime::builders::{ring_allgather, ring_allreduce};
use runtime::cpu::{
    format_table, parse_sizes, sweep, DataType, ReduceOp, RunOptions, SweepOptions, SweepRow,
};

#[test]
fn sweep_rows_table_and_json() {
    let p = ring_allreduce(&[0, 1, 2, 3], 2, false);
    let opts = SweepOptions {
        sizes: parse_sizes("1K:64K:4").unwrap(),
        outofplace: true,
        inplace: true,
        run: RunOptions {
            iters: 2,
            warmup: 1,
            ..RunOptions::default()
        },
    };
    let rows = sweep(&p, &opts).unwrap();
    assert_eq!(
        rows.len(),
        4,
        "1K 4K 16K 64K, out of place only (the program is not in place)"
    );
    for r in &rows {
        assert!(!r.inplace);
        assert_eq!(r.wrong, 0);
        assert_eq!(r.size, r.count as u64 * 4);
        assert_eq!(r.count % 8, 0, "whole chunks");
        assert!(r.time_us > 0.0);
        assert!((r.algbw - r.size as f64 / (r.time_us * 1e3)).abs() < 1e-9);
        assert!(
            (r.busbw - r.algbw * 1.5).abs() < 1e-9,
            "allreduce busbw = 2(n-1)/n algbw"
        );
        assert_eq!(
            (r.dtype.as_str(), r.redop.as_str(), r.root),
            ("float", "sum", -1)
        );
    }
    assert_eq!(rows[0].size, 1024);
    let table = format_table(&rows);
    assert!(
        table.contains("out-of-place") && table.contains("in-place") && table.contains("#wrong")
    );
    let lines: Vec<&str> = table.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].trim_start().starts_with("1024 "), "{}", lines[0]);
    assert!(
        lines[0].contains("N/A"),
        "in-place column is N/A: {}",
        lines[0]
    );
    let json = serde_json::to_string(&rows).unwrap();
    let back: Vec<SweepRow> = serde_json::from_str(&json).unwrap();
    assert_eq!(back.len(), rows.len());
    for (b, r) in back.iter().zip(&rows) {
        assert_eq!(
            (b.size, b.count, b.wrong, b.inplace),
            (r.size, r.count, r.wrong, r.inplace)
        );
        assert!((b.time_us - r.time_us).abs() <= 1e-9 * r.time_us);
    }
}

#[test]
fn sweep_in_place_allgather_with_f64_max() {
    let p = ring_allgather(&[2, 0, 1], 1, true);
    let opts = SweepOptions {
        sizes: vec![3 * 1000 * 8, 1 << 20],
        outofplace: true,
        inplace: true,
        run: RunOptions {
            dtype: DataType::F64,
            op: ReduceOp::Max,
            ..RunOptions::default()
        },
    };
    let rows = sweep(&p, &opts).unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows
        .iter()
        .all(|r| r.inplace && r.wrong == 0 && r.redop == "none" && r.dtype == "double"));
    assert_eq!(rows[0].count, 3000);
    let bad = SweepOptions {
        inplace: false,
        ..opts
    };
    assert!(sweep(&p, &bad).is_err(), "no valid mode requested");
}
