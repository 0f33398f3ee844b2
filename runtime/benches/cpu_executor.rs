//! CPU executor throughput: ring allgather over 8 ranks, 256 MB total (out of place, f32).
//! Only the collective itself is timed (inputs, threads and the result check are set up per
//! batch); throughput is reported in GB/s (1e9 bytes) of the 256 MB output buffer (algbw).
//!
//! Run: `cargo bench -p runtime --bench cpu_executor`

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use runtime::builders::ring_allgather;
use runtime::cpu::{run, DataType, RunOptions};
use std::time::{Duration, Instant};

const BYTES: u64 = 256 << 20;

fn ring_allgather_8x256mb(c: &mut Criterion) {
    let order: Vec<usize> = (0..8).collect();
    let p = ring_allgather(&order, 1, false);
    let base = RunOptions::for_bytes(&p, BYTES, DataType::F32);
    let mut group = c.benchmark_group("cpu_executor");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::BytesDecimal(BYTES));
    group.bench_function("ring_allgather_8ranks_256MB", |b| {
        b.iter_custom(|iters| {
            let opts = RunOptions {
                iters: iters as usize,
                ..base.clone()
            };
            let started = Instant::now();
            let r = run(&p, &opts).expect("runs");
            assert_eq!(r.wrong, 0, "wrong results");
            let timed = Duration::from_secs_f64(r.time_us * 1e-6 * iters as f64);
            assert!(timed <= started.elapsed());
            timed
        })
    });
    group.finish();
}

criterion_group!(benches, ring_allgather_8x256mb);
criterion_main!(benches);
