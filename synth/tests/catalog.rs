//! `synth catalog`: every file re-reads and verifies, ranges are disjoint and cover 1 B to
//! 16 GiB, plots are written; and the simulator ranks DGX-1's SMT Pareto algorithms as their
//! cost formula predicts.

use std::path::Path;
use std::time::{Duration, Instant};
use synth::catalog::{self, Manifest, Options};
use synth::collective::{Collective, Kind};
use synth::lower::{lower, LowerOptions};
use synth::progress::Progress;
use synth::simulate::{simulate, SimOptions};
use synth::smt::Limits;
use synth::synthesize::{synthesize, Request, Search};
use synth::topology::{self, Topology};

const SIXTEEN_GIB: u64 = 16 << 30;

/// A fresh scratch folder for one test, removed when the returned guard drops (also when
/// the test fails).
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("synth-catalog-{name}-"))
        .tempdir()
        .unwrap()
}

/// Checks the manifest and the files of a catalog written to `dir`.
fn check_catalog(manifest: &Manifest, dir: &Path, kinds: &[Kind]) {
    // The manifest on disk is the one returned.
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("manifest is JSON");
    assert_eq!(doc["collectives"].as_array().unwrap().len(), kinds.len());
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
    assert_eq!(manifest.collectives.len(), kinds.len());
    let mut listed = Vec::new();
    for (c, kind) in manifest.collectives.iter().zip(kinds) {
        assert_eq!(c.collective, kind.name());
        assert!(readme.contains(&format!("## {}", kind.name())));
        // Our ranges and those left to NCCL: increasing, disjoint, contiguous, from 1 B to
        // beyond 16 GiB.
        let ranges = &c.ranges;
        let mut all: Vec<(u64, u64, bool)> = ranges
            .iter()
            .map(|r| (r.min_bytes, r.max_bytes, true))
            .chain(c.left_to_nccl.iter().map(|r| (r[0], r[1], false)))
            .collect();
        all.sort();
        assert!(!all.is_empty());
        assert!(all[0].0 <= 1, "{}: starts at {}", c.collective, all[0].0);
        for pair in all.windows(2) {
            assert!(pair[0].1 != 0, "only the last range may be unlimited");
            assert!(pair[0].0 <= pair[0].1);
            assert_eq!(pair[1].0, pair[0].1 + 1, "gap or overlap");
        }
        let last = all.last().unwrap();
        assert!(last.1 == 0 || last.1 >= SIXTEEN_GIB);
        // Every grid size has one owner; ours have a chosen algorithm, NCCL's are faster there.
        for (i, &size) in manifest.sizes.iter().enumerate() {
            let inside: Vec<_> = all
                .iter()
                .filter(|r| r.0 <= size && (r.1 == 0 || size <= r.1))
                .collect();
            assert_eq!(inside.len(), 1, "size {size} is in {} ranges", inside.len());
            if inside[0].2 {
                let r = ranges.iter().find(|r| r.min_bytes == inside[0].0).unwrap();
                let p = r.points.iter().find(|p| p.size == size).expect("point");
                // Never slower than NCCL's choice (within the tie), and run with the
                // range's protocol.
                assert_eq!(p.protocol, r.protocol);
                if let Some(nccl) = c.baselines[i].best_time_us {
                    assert!(
                        p.time_us <= nccl * (1.0 + catalog::TIE),
                        "{} at {size}: {} us vs NCCL's choice {nccl} us",
                        c.collective,
                        p.time_us
                    );
                }
            } else {
                let best = c.baselines[i].best_time_us.expect("NCCL was simulated");
                let ours = c
                    .candidates
                    .iter()
                    .map(|x| x.points[i].time_us)
                    .fold(f64::INFINITY, f64::min);
                assert!(best < ours, "size {size} left to NCCL, which is slower");
            }
        }
        // Every XML re-reads, verifies and carries its range.
        for r in ranges {
            let files = [(Some(&r.file), false), (r.file_inplace.as_ref(), true)];
            for (file, inplace) in files {
                let Some(file) = file else { continue };
                let path = dir.join(file);
                let p = runtime::xml::read_file(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                runtime::verify::verify(&p).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert_eq!((p.min_bytes, p.max_bytes), (r.min_bytes, r.max_bytes));
                assert_eq!(p.inplace, inplace, "{}", path.display());
                assert_eq!(p.outofplace, !inplace, "{}", path.display());
                assert_eq!(p.collective, kind.to_ir().unwrap());
                assert_eq!(p.ngpus, manifest.ranks);
                assert_eq!(p.nchunksperloop, r.nchunksperloop);
                assert_eq!(p.protocol, r.protocol, "{}", path.display());
                listed.push(path.file_name().unwrap().to_string_lossy().to_string());
            }
        }
        // Ranges come in priority order when the files are sorted.
        let mut sorted: Vec<&String> = ranges.iter().map(|r| &r.file).collect();
        sorted.sort();
        assert_eq!(sorted, ranges.iter().map(|r| &r.file).collect::<Vec<_>>());
        // The plot.
        let svg = std::fs::read_to_string(dir.join(&c.svg)).expect("svg written");
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{}",
            c.svg
        );
        // An NCCL baseline (ring, tree or p2p) and the bound.
        assert!(svg.contains("NCCL ") && svg.contains("(simulated)") && svg.contains("cut bound"));
        for cand in &c.candidates {
            assert!(svg.contains(&cand.label), "{} not in the plot", cand.label);
            assert_eq!(cand.points.len(), manifest.sizes.len());
        }
    }
    // The algorithm folder holds exactly the listed XML files (MSCCL_ALGO_DIR parses all).
    let mut on_disk: Vec<String> = std::fs::read_dir(dir.join(catalog::ALGO_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    on_disk.sort();
    listed.sort();
    assert_eq!(on_disk, listed);
}

#[test]
fn dgx1_allgather_allreduce_catalog() {
    let topo = topology::load("dgx1").unwrap();
    let tmp = temp_dir("dgx1");
    let dir = tmp.path();
    let kinds = [Kind::AllGather, Kind::AllReduce];
    // The least-steps search plus the two Pareto instances keep the test fast.
    let options = Options {
        search: Search::LeastSteps {
            chunks: 1,
            rounds: None,
        },
        extra: vec![(Kind::AllGather, 2, 3, 2), (Kind::AllGather, 3, 7, 6)],
        instances: vec![1, 2],
        ..Options::default()
    };
    let manifest = catalog::build(&topo, &kinds, dir, &options, &Progress::hidden()).unwrap();
    check_catalog(&manifest, dir, &kinds);
    // Allgather: a bandwidth-optimal algorithm (R/C = 7/6: SMT's (3,7,6) or the rings'
    // (7,7,6), whichever simulates faster) serves the largest sizes, near the bound.
    let ag = &manifest.collectives[0];
    let last = ag.ranges.last().unwrap();
    assert_eq!(6 * last.rounds as usize, 7 * last.chunks, "R/C of {last:?}");
    let big = last.points.last().unwrap();
    assert!(big.busbw > 0.97 * ag.bound_busbw, "{} GB/s", big.busbw);
    // Rebuilding into the same folder replaces the old files instead of adding to them.
    // (The SMT race may find another schedule with the same (S, R, C), so the ranges can
    // differ; what must hold is that only the new files are there.)
    let again = catalog::build(&topo, &kinds[..1], dir, &options, &Progress::hidden()).unwrap();
    let mut expected: Vec<String> = again.collectives[0]
        .ranges
        .iter()
        .flat_map(|r| std::iter::once(r.file.clone()).chain(r.file_inplace.clone()))
        .map(|f| f.rsplit('/').next().unwrap().to_string())
        .collect();
    expected.sort();
    let mut on_disk: Vec<String> = std::fs::read_dir(dir.join(catalog::ALGO_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|f| f.starts_with("allgather-"))
        .collect();
    on_disk.sort();
    assert_eq!(on_disk, expected);
}

/// Small and medium sizes: each range runs its best protocol, and the catalog is never
/// slower than NCCL's choice (its algorithm and protocol) where it serves a size; where
/// NCCL's choice is faster the size is left to NCCL (`check_catalog`).
#[test]
fn small_sizes_catalog_is_never_slower_than_nccls_choice() {
    for (fabric, kind) in [
        ("ring:6", Kind::AllReduce),
        ("dgx-h100", Kind::AllReduce),
        ("dgx-a100x2", Kind::AllGather),
    ] {
        let topo = topology::load(fabric).unwrap();
        let tmp = temp_dir(&format!("small-{}", fabric.replace(':', "_")));
        let dir = tmp.path();
        let kinds = [kind];
        let options = Options {
            search: Search::LeastSteps {
                chunks: 1,
                rounds: None,
            },
            instances: vec![1],
            time_limit: 30.0,
            sizes: runtime::cpu::parse_sizes("1K:64M:4").unwrap(),
            ..Options::default()
        };
        let manifest = catalog::build(&topo, &kinds, dir, &options, &Progress::hidden()).unwrap();
        check_catalog(&manifest, dir, &kinds);
        let c = &manifest.collectives[0];
        // NCCL's choice is known at every size, and named.
        assert!(c.baselines.iter().all(|b| b.nccl.is_some()), "{fabric}");
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
        assert!(readme.contains("NCCL's choice"), "{fabric}");
    }
}

#[test]
fn dgx_a100_allgather_catalog() {
    let topo = topology::load("dgx-a100").unwrap();
    let tmp = temp_dir("dgx-a100");
    let dir = tmp.path();
    let kinds = [Kind::AllGather];
    let manifest =
        catalog::build(&topo, &kinds, dir, &Options::default(), &Progress::hidden()).unwrap();
    check_catalog(&manifest, dir, &kinds);
    let c = &manifest.collectives[0];
    let big = c.ranges.last().unwrap().points.last().unwrap();
    assert!(big.busbw > 0.97 * c.bound_busbw, "{} GB/s", big.busbw);
}

#[test]
fn cli_catalog_json_and_errors() {
    let tmp = temp_dir("cli");
    let dir = tmp.path();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_synth"))
        .args([
            "catalog",
            "--topo",
            "dgx-a100",
            "--colls",
            "allgather",
            "--json",
        ])
        .arg("--out")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["topology"], "dgx-a100");
    assert_eq!(doc["collectives"][0]["collective"], "allgather");
    for bad in [
        vec!["catalog", "--topo", "dgx-a100", "--colls", "nonsense"],
        vec!["catalog", "--topo", "nowhere"],
        vec!["catalog", "--topo", "dgx1", "--add", "allgather:3,7"],
        vec!["catalog", "--topo", "dgx1", "--instances", "0"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_synth"))
            .args(&bad)
            .arg("--out")
            .arg(dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{bad:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{bad:?}: {stderr}");
    }
}

fn instance(
    topo: &Topology,
    steps: usize,
    rounds: usize,
    chunks: usize,
) -> synth::algorithm::Algorithm {
    let progress = Progress::hidden();
    let request = Request {
        topology: topo,
        collective: Collective::new(Kind::AllGather, topo.ranks, 0, 1).unwrap(),
        search: Search::Instance {
            steps,
            rounds,
            chunks,
        },
        limits: Limits {
            max_steps: 16,
            max_chunks: 8,
            max_chunks_given: false,
            deadline: Instant::now() + Duration::from_secs(300),
            extra_memory: None,
            work_limit: None,
        },
        progress: &progress,
    };
    let s = synthesize(&request).unwrap();
    s.algorithms
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("({steps},{rounds},{chunks}) is SAT"))
}

#[test]
fn dgx1_allgather_simulator_ranks_pareto_as_cost_formula() {
    let topo = topology::load("dgx1").unwrap();
    let fast = instance(&topo, 2, 3, 2); // fewer steps: better for small sizes
    let lean = instance(&topo, 3, 7, 6); // 7/6 rounds per chunk: better for large sizes
    let program = |a: &synth::algorithm::Algorithm| {
        let p = lower(a, &LowerOptions::default()).unwrap();
        runtime::verify::verify(&p).unwrap();
        p
    };
    let (pf, pl) = (program(&fast), program(&lean));
    let opts = SimOptions::default();
    for (size, fast_wins) in [(1u64 << 10, true), (1u64 << 30, false)] {
        let tf = simulate(&pf, &topo, size, &opts).unwrap().time_us;
        let tl = simulate(&pl, &topo, size, &opts).unwrap().time_us;
        let (ef, el) = (
            fast.estimated_time_us(&topo, size as f64),
            lean.estimated_time_us(&topo, size as f64),
        );
        assert_eq!(ef < el, fast_wins, "cost formula at {size} B: {ef} vs {el}");
        assert_eq!(
            tf < tl,
            fast_wins,
            "simulator at {size} B: (2,3,2) {tf} us, (3,7,6) {tl} us"
        );
    }
}

/// Alltoall has NCCL's point-to-point baseline at every grid size; a legacy catalog of it
/// keeps the runtime's start-up scratch allocation bounded (files that use scratch get a
/// real `maxBytes`, and an open-ended range beyond it is left to NCCL).
#[test]
fn dgx1_alltoall_catalog_has_the_p2p_baseline() {
    let topo = topology::load("dgx1").unwrap();
    let kinds = [Kind::AllToAll];
    let options = Options {
        search: Search::Instance {
            steps: 3,
            rounds: 3,
            chunks: 1,
        },
        instances: vec![1, 2],
        ..Options::default()
    };
    let tmp = temp_dir("dgx1-alltoall");
    let dir = tmp.path();
    let manifest = catalog::build(&topo, &kinds, dir, &options, &Progress::hidden()).unwrap();
    check_catalog(&manifest, dir, &kinds);
    let c = &manifest.collectives[0];
    for b in &c.baselines {
        assert!(b.ring.is_none() && b.tree.is_none());
        let p2p = b.p2p.expect("p2p simulated at every size");
        assert!(p2p > 0.0 && b.best_time_us.is_some());
        // (Below 4 KiB a size is simulated rounded up to whole elements per chunk, so the
        // bound at the grid size does not apply.)
        if b.size >= 4 << 10 {
            assert!(p2p <= b.bound * (1.0 + 1e-9), "{p2p} at {}", b.size);
        }
    }
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(readme.contains("NCCL p2p"));
    let svg = std::fs::read_to_string(dir.join(&c.svg)).unwrap();
    assert!(svg.contains("NCCL p2p"));

    let legacy = Options {
        flavor: runtime::ir::Flavor::Legacy,
        ..options
    };
    let tmp = temp_dir("dgx1-alltoall-legacy");
    let dir = tmp.path();
    let manifest = catalog::build(&topo, &kinds, dir, &legacy, &Progress::hidden()).unwrap();
    let c = &manifest.collectives[0];
    for r in &c.ranges {
        for file in std::iter::once(&r.file).chain(&r.file_inplace) {
            let p = runtime::xml::read_file(dir.join(file)).unwrap();
            let scratch = p.gpus.iter().map(|g| g.scratch_chunks).max().unwrap() as u128;
            let max = p.max_bytes as u128;
            assert!(max > 0 && max * scratch <= i64::MAX as u128, "{file}");
            if r.max_bytes == 0 && scratch > 0 {
                let one_gib_call = ((1u128 << 30) + 1) * scratch;
                let budget = (1u128 << 30) * p.nchunksperloop as u128;
                assert!(max * scratch <= budget.max(one_gib_call), "{file}: {max}");
            }
        }
    }
    // Ours and NCCL's ranges still cover every size from 1 B, without overlaps.
    let mut all: Vec<[u64; 2]> = c
        .ranges
        .iter()
        .map(|r| [r.min_bytes, r.max_bytes])
        .chain(c.left_to_nccl.iter().copied())
        .collect();
    all.sort();
    assert_eq!(all[0][0], 1);
    for pair in all.windows(2) {
        assert_eq!(pair[1][0], pair[0][1] + 1);
    }
    assert_eq!(all.last().unwrap()[1], 0);
}
