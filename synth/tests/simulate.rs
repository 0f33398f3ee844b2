//! The simulator, the NCCL baselines, NCCL's model and the cut bounds.

use runtime::ir::{Buffer, Collective, Gpu, Op, Program, Protocol, Slot, Step, Threadblock};
use synth::baseline::{self, Algo, BaselineOptions, Tuner};
use synth::cutbound::{self, CutBound};
use synth::select::{simulation_order, Point, Race, Runs, Simulation, ALL_PROTOCOLS};
use synth::simulate::{
    simulate, simulate_sizes, simulate_sizes_unless, ModelParams, PerProtocol, SimOptions, Slicing,
};
use synth::topology::{self, Link, SwitchConstraint, Topology};

const GB: u64 = 1 << 30;

/// A fresh scratch folder for one test, removed when the returned guard drops (also when
/// the test fails).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("synth-{name}-"))
        .tempdir()
        .unwrap()
}

/// Whole chunks and no launch latency: a time is the transfers' alone.
fn whole() -> SimOptions {
    SimOptions {
        slicing: Slicing::WholeChunks,
        model: ModelParams {
            launch_us: PerProtocol {
                simple: 0.0,
                ll: 0.0,
                ll128: 0.0,
            },
            ..ModelParams::default()
        },
        ..SimOptions::default()
    }
}

/// Rank 0 sends its one-chunk input to every rank in `to`, one threadblock per peer, all at
/// once (a broadcast with one chunk).
fn fan_out(n: usize, to: &[usize]) -> Program {
    let slot = |b| Slot::new(b, 0);
    let mut gpus: Vec<Gpu> = (0..n)
        .map(|rank| Gpu {
            rank,
            input_chunks: 1,
            output_chunks: 1,
            scratch_chunks: 0,
            threadblocks: vec![],
        })
        .collect();
    for &d in to {
        gpus[0].threadblocks.push(Threadblock {
            send: Some(d),
            recv: None,
            channel: 0,
            steps: vec![Step::new(
                Op::Send,
                slot(Buffer::Input),
                slot(Buffer::Output),
                1,
            )],
        });
        gpus[d].threadblocks.push(Threadblock {
            send: None,
            recv: Some(0),
            channel: 0,
            steps: vec![Step::new(
                Op::Recv,
                slot(Buffer::Input),
                slot(Buffer::Output),
                1,
            )],
        });
    }
    Program {
        name: "fan-out".into(),
        collective: Collective::Broadcast,
        root: 0,
        protocol: Protocol::Simple,
        ngpus: n,
        nchunksperloop: 1,
        inplace: false,
        outofplace: true,
        min_bytes: 0,
        max_bytes: 0,
        gpus,
        custom: None,
        compute: None,
    }
}

fn pair(bw: f64, alpha: f64) -> Topology {
    Topology {
        name: "pair".into(),
        ranks: 2,
        node_of: vec![0, 0],
        links: vec![
            Link {
                src: 0,
                dst: 1,
                bandwidth: bw,
                alpha,
            },
            Link {
                src: 1,
                dst: 0,
                bandwidth: bw,
                alpha,
            },
        ],
        switches: vec![],
        runtime: None,
    }
}

#[test]
fn single_transfer_costs_alpha_plus_bytes_over_bandwidth() {
    let topo = pair(25.0, 0.7);
    let p = fan_out(2, &[1]);
    let size = 1 << 20;
    let r = simulate(&p, &topo, size, &whole()).unwrap();
    let expect = 0.7 + size as f64 / (25.0 * 1e3);
    assert!(
        (r.time_us - expect).abs() < 1e-6 * expect,
        "{} vs {expect}",
        r.time_us
    );
    assert_eq!(r.transfers, 1);
    // Broadcast: busbw = algbw = size / time.
    assert!((r.busbw - size as f64 / (expect * 1e3)).abs() < 1e-6);
}

#[test]
fn two_transfers_through_one_nvswitch_port_take_twice_as_long() {
    // Hand-made: two links out of rank 0 under one 100 GB/s port, no latency.
    let mut topo = Topology {
        name: "port".into(),
        ranks: 3,
        node_of: vec![0; 3],
        links: vec![
            Link {
                src: 0,
                dst: 1,
                bandwidth: 100.0,
                alpha: 0.0,
            },
            Link {
                src: 0,
                dst: 2,
                bandwidth: 100.0,
                alpha: 0.0,
            },
        ],
        switches: vec![SwitchConstraint {
            name: "out-0".into(),
            srcs: vec![0],
            dsts: vec![1, 2],
            bandwidth: 100.0,
        }],
        runtime: None,
    };
    let size = 64 << 20;
    let one = simulate(&fan_out(3, &[1]), &topo, size, &whole())
        .unwrap()
        .time_us;
    let two = simulate(&fan_out(3, &[1, 2]), &topo, size, &whole())
        .unwrap()
        .time_us;
    assert!((two / one - 2.0).abs() < 1e-9, "{one} {two}");
    // Without the port constraint the links are independent.
    topo.switches.clear();
    let free = simulate(&fan_out(3, &[1, 2]), &topo, size, &whole())
        .unwrap()
        .time_us;
    assert!((free / one - 1.0).abs() < 1e-9);

    // The built-in DGX-A100: 300 GB/s links under a 300 GB/s NVSwitch port per GPU.
    let a100 = topology::load("dgx-a100").unwrap();
    let one = simulate(&fan_out(8, &[1]), &a100, size, &whole())
        .unwrap()
        .time_us;
    let two = simulate(&fan_out(8, &[1, 2]), &a100, size, &whole())
        .unwrap()
        .time_us;
    let alpha = a100.link(0, 1).unwrap().alpha;
    assert!(
        ((two - alpha) / (one - alpha) - 2.0).abs() < 1e-9,
        "{one} {two}"
    );
}

#[test]
fn slices_pipeline_a_chain() {
    // A 3-rank chain 0 -> 1 -> 2 with one chunk: whole chunks cost two full hops; slices
    // overlap the hops.
    let topo = topology::load("line:3").unwrap();
    let rings = vec![vec![0, 1, 2]];
    let p = baseline::ring_program(Collective::Broadcast, 3, &rings, 0).unwrap();
    runtime::verify::verify(&p).unwrap();
    let size = 256 << 20;
    let whole_t = simulate(&p, &topo, size, &whole()).unwrap().time_us;
    let sliced = simulate(&p, &topo, size, &SimOptions::default())
        .unwrap()
        .time_us;
    let bw = topo.link(0, 1).unwrap().bandwidth * 1e3;
    assert!(whole_t > 1.99 * size as f64 / bw);
    assert!(sliced < 1.1 * size as f64 / bw, "{sliced}");
}

#[test]
fn ring_and_tree_baselines_verify() {
    for name in ["dgx1", "dgx-a100", "dgx-a100x2"] {
        let topo = topology::load(name).unwrap();
        for coll in [
            Collective::AllGather,
            Collective::ReduceScatter,
            Collective::AllReduce,
            Collective::Broadcast,
            Collective::Reduce,
        ] {
            let opts = BaselineOptions {
                channels: None,
                root: 3,
            };
            let p = baseline::ring(coll, &topo, &opts).unwrap();
            runtime::verify::verify(&p).unwrap_or_else(|e| panic!("ring {coll} on {name}: {e}"));
        }
        let p = baseline::tree(Collective::AllReduce, &topo, &BaselineOptions::default()).unwrap();
        runtime::verify::verify(&p).unwrap_or_else(|e| panic!("tree on {name}: {e}"));
        assert!(baseline::tree(Collective::AllGather, &topo, &BaselineOptions::default()).is_err());
    }
}

#[test]
fn ring_busbw_matches_its_analytic_value() {
    // Analytic ring busbw: the channels' total rate (each channel limited by its slowest
    // link / port / NIC share); busbw = algbw × (n-1)/n removes the ring's (n-1)/n factor.
    for (name, expect) in [("dgx1", 150.0), ("dgx-a100", 300.0), ("dgx-a100x2", 200.0)] {
        let topo = topology::load(name).unwrap();
        let analytic = baseline::model::channel_bus_bandwidth(Algo::Ring, &topo).unwrap();
        assert!(
            (analytic - expect).abs() < 1e-6,
            "{name}: analytic {analytic}"
        );
        let p = baseline::ring(Collective::AllGather, &topo, &BaselineOptions::default()).unwrap();
        let r = simulate(&p, &topo, GB, &SimOptions::default()).unwrap();
        eprintln!(
            "{name}: ring allgather 1 GiB busbw {:.1} GB/s (analytic {analytic})",
            r.busbw
        );
        assert!(
            r.busbw <= analytic * 1.0001 && r.busbw > 0.85 * analytic,
            "{name}: {}",
            r.busbw
        );
        let n = topo.ranks as f64;
        assert!((r.algbw * (n - 1.0) / n - r.busbw).abs() < 1e-9);
    }
}

#[test]
fn dgx_a100x2_allgather_bound_is_325() {
    let topo = topology::load("dgx-a100x2").unwrap();
    let b = cutbound::busbw_bound(Collective::AllGather, &topo);
    assert!((b - 325.0).abs() < 1.0, "{b}");
    let cut = CutBound::new(Collective::AllGather, &topo, 0);
    assert!(
        cut.exact && cut.binding.contains("max-flow"),
        "{}",
        cut.binding
    );
    // The node cut alone allows 375 GB/s: 8 × 25 GB/s of NICs for half the data.
    let inside: Vec<bool> = (0..16).map(|r| r < 8).collect();
    assert!((cutbound::cut_capacity(&topo, &inside, true) - 200.0).abs() < 1e-6);
    // Allreduce on one DGX-A100: every rank must receive the whole buffer S through its
    // 300 GB/s port (busbw = 2(n-1)/n · S / t ≤ 2·7/8·300 = 525), and every byte crosses
    // 2(n-1) links in all through 8 ports of 300 GB/s together (busbw ≤ 8·300/8 = 300,
    // what reduce-scatter + allgather reach). (The classical 2(n-1)/n·S per rank is no
    // bound: a star or line allreduce beats it.)
    let one = topology::load("dgx-a100").unwrap();
    assert!((cutbound::busbw_bound(Collective::AllReduce, &one) - 300.0).abs() < 1e-6);
    // Time bound grows with size and is at least one latency.
    let t1 = cutbound::time_bound_us(Collective::AllGather, &topo, 1 << 10);
    let t2 = cutbound::time_bound_us(Collective::AllGather, &topo, GB);
    assert!(t1 >= 0.7 && t2 > t1);
}

#[test]
fn a_nic_shared_by_a_line_of_gpus_bounds_at_its_tree_packing() {
    // Two nodes of three GPUs in a line (25 GB/s links), one 25 GB/s NIC per node. An end GPU
    // must receive 5x GB/s (x per root) through one link and the NIC, so 5x - 25 through
    // the NIC, which the node's two ends share: 2(5x - 25) <= 25, x <= 7.5, busbw 5x = 37.5.
    // The cuts (all links together) allow 41.7.
    let dir = scratch("line-nic");
    let path = dir.path().join("line3x2.toml");
    let text = "[multinode]\nnode = \"line:3\"\nnodes = 2\nnic_bandwidth = 25\nnics_per_node = 1\n";
    std::fs::write(&path, text).unwrap();
    let topo = topology::load(path.to_str().unwrap()).unwrap();
    for coll in [Collective::AllGather, Collective::ReduceScatter] {
        let b = CutBound::new(coll, &topo, 0);
        assert!((b.busbw() - 37.5).abs() < 1e-6, "{coll:?}: {}", b.busbw());
        assert!(
            b.exact && b.binding.contains("tree packing"),
            "{}",
            b.binding
        );
    }
    let halves = cutbound::two_phase_allreduce_busbw(&topo, None);
    assert!((halves - 37.5).abs() < 1e-6, "{halves}");
}

#[test]
fn baselines_never_beat_the_bound() {
    // star:5 and line:4 have no Hamiltonian cycle: their rings are relayed.
    for name in [
        "dgx1",
        "dgx-a100",
        "dgx-a100x2",
        "ring:6",
        "star:5",
        "line:4",
    ] {
        let topo = topology::load(name).unwrap();
        for coll in [
            Collective::AllGather,
            Collective::ReduceScatter,
            Collective::AllReduce,
            Collective::Broadcast,
        ] {
            let bound = CutBound::new(coll, &topo, 0);
            let mut programs =
                vec![baseline::ring(coll, &topo, &BaselineOptions::default()).unwrap()];
            programs.extend(baseline::tree(coll, &topo, &BaselineOptions::default()).ok());
            for p in &programs {
                for size in [4 << 10, 1 << 20, 256 << 20] {
                    let r = simulate(p, &topo, size, &SimOptions::default()).unwrap();
                    let t = bound.time_us(r.size_bytes);
                    assert!(
                        r.time_us >= t * (1.0 - 1e-9),
                        "{} on {name} at {size}: {} < bound {t}",
                        p.name,
                        r.time_us
                    );
                    assert!(r.busbw <= bound.busbw() * (1.0 + 1e-9));
                }
            }
        }
    }
}

#[test]
fn nccl_model_is_plausible() {
    let topo = topology::load("dgx-a100x2").unwrap();
    let tuning = ModelParams::default().nccl;
    let time = |coll, algo, protocol, size| {
        baseline::nccl_model_time_us(coll, algo, protocol, &topo, size, &tuning)
    };
    let small = time(Collective::AllReduce, Algo::Ring, Protocol::Simple, 1024).unwrap();
    let big = time(Collective::AllReduce, Algo::Ring, Protocol::Simple, GB).unwrap();
    assert!(small > 8.4 && big > small);
    // At 1 GiB the ring runs near its bus bandwidth (200 GB/s on 8 NICs).
    let busbw = GB as f64 / (big * 1e3) * Collective::AllReduce.busbw_factor(16);
    assert!(busbw > 180.0 && busbw <= 200.0, "{busbw}");
    // LL: a fraction of Simple's latency, a quarter of its bandwidth.
    let ll_small = time(Collective::AllReduce, Algo::Ring, Protocol::LL, 1024).unwrap();
    let ll_big = time(Collective::AllReduce, Algo::Ring, Protocol::LL, GB).unwrap();
    assert!(
        ll_small < small && ll_big > 3.0 * big,
        "{ll_small} {ll_big}"
    );
    assert!(time(Collective::AllGather, Algo::Tree, Protocol::Simple, GB).is_err());
    assert!(time(Collective::AllToAll, Algo::Ring, Protocol::Simple, GB).is_err());
    assert!(time(Collective::AllReduce, Algo::Nvls, Protocol::Simple, GB).is_err());
    let (_, choice) =
        baseline::nccl_model_busbw(Collective::AllReduce, &topo, GB, &tuning).unwrap();
    assert_eq!(
        (choice.algo, choice.protocol),
        (Algo::Ring, Protocol::Simple)
    );
}

/// NCCL's tuner picks as NCCL does: tree/LL for a tiny allreduce across nodes, ring/Simple
/// at 1 GB, LL for small single-node collectives, NVLS only on an NVSwitch box that can
/// reduce (dgx-h100, not dgx-a100), point-to-point for alltoall.
#[test]
fn nccl_tuner_choices_are_sane() {
    let tuning = ModelParams::default().nccl;
    let choose = |fabric: &str, coll, size| {
        let topo = topology::load(fabric).unwrap();
        let c = Tuner::new(coll, &topo, &tuning)
            .unwrap()
            .choose(size)
            .unwrap();
        (c.algo, c.protocol)
    };
    for fabric in ["dgx-a100x2", "dgx-h100x2", "dgx-a100x4"] {
        assert_eq!(
            choose(fabric, Collective::AllReduce, 1 << 10),
            (Algo::Tree, Protocol::LL),
            "{fabric}"
        );
        assert_eq!(
            choose(fabric, Collective::AllReduce, GB),
            (Algo::Ring, Protocol::Simple),
            "{fabric}"
        );
    }
    for fabric in ["dgx-a100", "ring:8", "torus-2d:4x4", "dgx1"] {
        for coll in [Collective::AllGather, Collective::AllReduce] {
            assert_eq!(
                choose(fabric, coll, 1 << 10).1,
                Protocol::LL,
                "{fabric} {coll}"
            );
            assert_eq!(
                choose(fabric, coll, GB).1,
                Protocol::Simple,
                "{fabric} {coll}"
            );
        }
    }
    assert_eq!(choose("dgx-h100", Collective::AllReduce, GB).0, Algo::Nvls);
    assert_ne!(choose("dgx-a100", Collective::AllReduce, GB).0, Algo::Nvls);
    assert_ne!(choose("dgx-h100", Collective::AllGather, GB).0, Algo::Nvls);
    assert_eq!(
        choose("dgx-a100", Collective::AllToAll, 1 << 10),
        (Algo::P2p, Protocol::Simple)
    );
}

/// The same program runs faster under LL than under Simple at 1 KB (a fraction of the
/// per-hop latency) and slower at 16 MB (half the wire carries data), on built-in and
/// generated fabrics; the selection names the faster protocol per size.
#[test]
fn ll_wins_small_and_loses_large_on_the_same_fabric() {
    for fabric in ["dgx-a100", "ring:8", "torus-2d:4x4", "dgx-a100x2"] {
        let topo = topology::load(fabric).unwrap();
        for coll in [Collective::AllReduce, Collective::AllGather] {
            let p = baseline::ring(coll, &topo, &BaselineOptions::default()).unwrap();
            let at = |size, protocol| {
                let opts = SimOptions::default().with_protocol(protocol);
                simulate(&p, &topo, size, &opts).unwrap().time_us
            };
            let (small, large) = (1 << 10, 16 << 20);
            assert!(
                at(small, Protocol::LL) < at(small, Protocol::Simple),
                "{fabric} {coll}: LL {} vs Simple {} at 1 KB",
                at(small, Protocol::LL),
                at(small, Protocol::Simple)
            );
            assert!(
                at(large, Protocol::LL) > at(large, Protocol::Simple),
                "{fabric} {coll} at 16 MB"
            );
            let sizes = [small, large];
            let simulation = Simulation {
                topology: &topo,
                sizes: &sizes,
                options: SimOptions::default(),
                runs: Runs::Together,
                protocols: &ALL_PROTOCOLS,
            };
            let curve = simulation.curve(&p).unwrap();
            assert_eq!(curve[0].protocol, Protocol::LL, "{fabric} {coll}");
            assert_ne!(curve[1].protocol, Protocol::LL, "{fabric} {coll}");
            assert_eq!(curve[0].time_us, at(small, Protocol::LL));
        }
    }
}

/// A model file changes the simulation: a deeper FIFO never slows a program, a larger
/// launch latency adds to its time.
#[test]
fn model_parameters_reach_the_simulator() {
    let topo = topology::load("dgx-a100").unwrap();
    let p = baseline::ring(Collective::AllReduce, &topo, &BaselineOptions::default()).unwrap();
    let base = simulate(&p, &topo, 1 << 20, &SimOptions::default())
        .unwrap()
        .time_us;
    let text = "[launch_us]\nsimple = 108.4\nll = 3.6\nll128 = 10\n";
    let model = ModelParams::parse(text, std::path::Path::new("m.toml")).unwrap();
    let opts = SimOptions {
        model,
        ..SimOptions::default()
    };
    let slower = simulate(&p, &topo, 1 << 20, &opts).unwrap().time_us;
    assert!((slower - base - 100.0).abs() < 1e-6, "{base} {slower}");
}

#[test]
fn mismatches_are_errors() {
    let dgx1 = topology::load("dgx1").unwrap();
    let a100x2 = topology::load("dgx-a100x2").unwrap();
    let p = baseline::ring(Collective::AllGather, &dgx1, &BaselineOptions::default()).unwrap();
    let e = simulate(&p, &a100x2, 1 << 20, &SimOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("8 ranks") && e.contains("16"), "{e}");
    assert!(!e.contains('\n'));
    // A send between ranks without a link.
    let line = topology::load("line:3").unwrap();
    let e = simulate(&fan_out(3, &[2]), &line, 1 << 20, &SimOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no link 0->2"), "{e}");
    assert!(simulate(&fan_out(3, &[1]), &line, 0, &SimOptions::default()).is_err());
}

#[test]
fn deadlock_is_an_error() {
    // Rank 1 waits for a message rank 0 never sends.
    let mut p = fan_out(2, &[1]);
    p.gpus[0].threadblocks[0].steps.clear();
    p.gpus[0].threadblocks[0].steps.push(Step::new(
        Op::Copy,
        Slot::new(Buffer::Input, 0),
        Slot::new(Buffer::Output, 0),
        1,
    ));
    let e = simulate(&p, &pair(25.0, 0.7), 1 << 20, &SimOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("deadlock"), "{e}");
}

fn cli(args: &[&str]) -> anyhow::Result<String> {
    let mut out = Vec::new();
    synth::cli::run(args.iter().copied(), &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

#[test]
fn cli_simulate_prints_table_and_json() {
    let topo = topology::load("dgx-a100").unwrap();
    let p = baseline::ring(Collective::AllReduce, &topo, &BaselineOptions::default()).unwrap();
    let xml = runtime::xml::write(&p, runtime::ir::Flavor::Nccl).unwrap();
    let tmp = scratch("sim");
    let dir = tmp.path();
    let file = dir.join("ring.xml");
    std::fs::write(&file, xml).unwrap();
    let f = file.to_str().unwrap();

    let table = cli(&[
        "synth", "simulate", f, "--topo", "dgx-a100", "--sizes", "1M:4M",
    ])
    .unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2 + 3, "{table}");
    assert!(lines[1].contains("busbw") && lines[1].contains("bound"));
    let json = cli(&[
        "synth", "simulate", f, "--topo", "dgx-a100", "--sizes", "64M", "--json",
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let row = &v["rows"][0];
    let (busbw, ring) = (
        row["busbw"].as_f64().unwrap(),
        row["ring_busbw"].as_f64().unwrap(),
    );
    // The file is the ring baseline itself.
    assert!((busbw - ring).abs() < 1e-9 * busbw);
    assert!(busbw <= row["bound_busbw"].as_f64().unwrap());
    assert!(row["tree_busbw"].as_f64().is_some() && row["nccl_model_busbw"].as_f64().is_some());

    let e = cli(&["synth", "simulate", f, "--topo", "dgx1x2", "--sizes", "1M"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("8 ranks") && !e.contains('\n'), "{e}");
    let e = cli(&[
        "synth", "simulate", f, "--topo", "dgx-a100", "--sizes", "lots",
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("--sizes"), "{e}");
    let missing = dir.join("missing.xml");
    let e = cli(&[
        "synth",
        "simulate",
        missing.to_str().unwrap(),
        "--topo",
        "dgx-a100",
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("missing.xml") && !e.contains('\n'), "{e}");
}

/// NCCL's point-to-point alltoall, gather and scatter: they verify, and they simulate at
/// most at the cut bound and, where they are limited by a cut the bound knows (one rank's
/// or one node's links), close to it.
#[test]
fn p2p_baselines_verify_and_meet_the_bound() {
    // (fabric, collective, least busbw at 1 GiB as a fraction of the bound, or an absolute
    // figure where the bound is loose)
    let cases: [(&str, Collective, f64); 12] = [
        // Fully connected: every block direct, each rank's 7 links carry one block each.
        ("fully-connected:8", Collective::AllToAll, 0.99),
        ("dgx-a100", Collective::AllToAll, 0.99),
        ("dgx-a100", Collective::Gather, 0.99),
        ("dgx-a100", Collective::Scatter, 0.99),
        // The node cut (8 NICs for half the data each way) binds alltoall.
        ("dgx-a100x2", Collective::AllToAll, 0.99),
        // Rails: blocks for another rail cross NVSwitch first (PXN-like relays).
        ("dgx-a100x2:rail", Collective::AllToAll, 0.99),
        ("dgx-a100x2:rail", Collective::Gather, 0.95),
        // DGX-1: three peers per GPU are two NVLinks away; the bisection between the two
        // quads (150 GB/s each way for 16 blocks) limits alltoall to 7 / (16 / 150) = 65.6
        // GB/s, 58.3 with whole blocks (a 25 GB/s cross link carries 3). The bound (per rank)
        // says 150.
        ("dgx1", Collective::AllToAll, 55.0),
        // Root 3 has links of 25, 50, 50 and 25 GB/s: 7 whole blocks put 2 on a 25 GB/s
        // link at best, 7 / (2 / 25) = 87.5 GB/s (the bound, with split blocks: 150).
        ("dgx1", Collective::Gather, 85.0),
        ("dgx1", Collective::Scatter, 85.0),
        // 4x4 torus: 512 block hops over 64 links of 25 GB/s: 8 blocks per link at best,
        // 15 · 25 / 8 = 46.9 GB/s (the per-rank bound says 100); at most 9 per link here.
        ("torus-2d:4x4", Collective::AllToAll, 40.0),
        ("torus-2d:4x4", Collective::Scatter, 0.9),
    ];
    for (name, coll, least) in cases {
        let topo = topology::load(name).unwrap();
        let opts = BaselineOptions {
            channels: None,
            root: 3,
        };
        let p = baseline::p2p(coll, &topo, &opts).unwrap();
        runtime::verify::verify(&p).unwrap_or_else(|e| panic!("p2p {coll} on {name}: {e}"));
        let bound = CutBound::new(coll, &topo, 3);
        for size in [4 << 10, 1 << 20, GB] {
            let r = simulate(&p, &topo, size, &SimOptions::default()).unwrap();
            assert!(
                r.time_us >= bound.time_us(r.size_bytes) * (1.0 - 1e-9),
                "{coll} on {name} at {size}: {} us beats the bound",
                r.time_us
            );
            assert!(r.busbw <= bound.busbw() * (1.0 + 1e-9));
            if size == GB {
                let floor = if least < 1.0 {
                    least * bound.busbw()
                } else {
                    least
                };
                eprintln!(
                    "{coll} on {name}: p2p {:.2} GB/s, bound {:.2}",
                    r.busbw,
                    bound.busbw()
                );
                assert!(r.busbw >= floor, "{coll} on {name}: {} < {floor}", r.busbw);
            }
        }
    }
}

#[test]
fn p2p_baseline_relays_only_where_no_link_joins_two_ranks() {
    let opts = BaselineOptions::default();
    let full = topology::load("dgx-a100x2").unwrap();
    let p = baseline::p2p(Collective::AllToAll, &full, &opts).unwrap();
    assert!(p.gpus.iter().all(|g| g.scratch_chunks == 0));
    assert_eq!(p.name, "nccl-p2p-alltoall-dgx-a100x2");
    // DGX-1: GPU 0 has no NVLink to 5, 6 and 7, so their blocks pass through a neighbour
    // (24 relayed blocks on 8 GPUs; the channel of a block's second link is 1).
    let dgx1 = topology::load("dgx1").unwrap();
    let p = baseline::p2p(Collective::AllToAll, &dgx1, &opts).unwrap();
    let relayed: usize = p.gpus.iter().map(|g| g.scratch_chunks).sum();
    assert_eq!(relayed, 24);
    assert_eq!(p.nchannels(), 2);
    // The others are refused, in one line.
    let e = baseline::p2p(Collective::AllReduce, &dgx1, &opts).unwrap_err();
    assert!(e.to_string().contains("ring or tree"), "{e}");
    let e = baseline::ring(Collective::AllToAll, &dgx1, &opts).unwrap_err();
    assert!(e.to_string().contains("point-to-point"), "{e}");
}

#[test]
fn sizes_simulated_together_equal_one_by_one() {
    // One layout, runs in parallel: the same figures as separate simulations.
    let topo = topology::load("dgx-a100x2").unwrap();
    let ring = baseline::ring(
        Collective::AllReduce,
        &topo,
        &BaselineOptions {
            channels: None,
            root: 0,
        },
    )
    .unwrap();
    let sizes = [1 << 10, 1 << 16, 1 << 20, 1 << 30];
    let opts = SimOptions::default();
    let together = simulate_sizes(&ring, &topo, &sizes, &opts).unwrap();
    assert_eq!(together.len(), sizes.len());
    for (run, &size) in together.iter().zip(&sizes) {
        assert_eq!(*run, simulate(&ring, &topo, size, &opts).unwrap(), "{size}");
    }
    assert!(simulate_sizes(&ring, &topo, &[1 << 20, 0], &opts).is_err());
}

/// `synth simulate` compares a program with NCCL's ring as NCCL would run it: on a 2-D torus
/// four rings over every link (about 99 GB/s, not one ring's 25); on a star, whose leaves
/// share no link, a ring relayed through the hub (before, no ring column at all).
#[test]
fn cli_simulate_compares_with_rings_over_every_link_and_relayed_rings() {
    let tmp = scratch("sim-rings");
    let dir = tmp.path();
    for (name, low, high) in [("torus-2d:8x8", 98.0, 100.0), ("star:5", 10.0, 25.0)] {
        let topo = topology::load(name).unwrap();
        let p = baseline::ring(Collective::AllGather, &topo, &BaselineOptions::default()).unwrap();
        runtime::verify::verify(&p).unwrap();
        let file = dir.join(format!("{}.xml", name.replace(':', "_")));
        std::fs::write(
            &file,
            runtime::xml::write(&p, runtime::ir::Flavor::Nccl).unwrap(),
        )
        .unwrap();
        let json = cli(&[
            "synth",
            "simulate",
            file.to_str().unwrap(),
            "--topo",
            name,
            "--sizes",
            "1G",
            "--json",
        ])
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let row = &v["rows"][0];
        let (busbw, ring) = (
            row["busbw"].as_f64().unwrap(),
            row["ring_busbw"].as_f64().unwrap(),
        );
        assert!((low..=high).contains(&ring), "{name}: ring {ring}");
        assert!((busbw - ring).abs() < 1e-6, "{name}: {busbw} vs {ring}");
    }
}

/// `--model FILE` on every command that simulates: a malformed file, an unknown field or a
/// value out of range is a one-line error naming the file and the field, exit 1.
#[test]
fn cli_model_file_errors_name_the_file_and_field() {
    let tmp = scratch("model");
    let dir = tmp.path();
    let topo = topology::load("ring:4").unwrap();
    let p = baseline::ring(Collective::AllGather, &topo, &BaselineOptions::default()).unwrap();
    let xml = dir.join("ring.xml");
    std::fs::write(
        &xml,
        runtime::xml::write(&p, runtime::ir::Flavor::Nccl).unwrap(),
    )
    .unwrap();
    let xml = xml.to_str().unwrap().to_string();
    let cases = [
        (
            "unknown.toml",
            "fifo_depth = 2\nfifo_dept = 3\n",
            "fifo_dept",
        ),
        (
            "range.toml",
            "[wire_efficiency]\nsimple = 1\nll = 1.5\nll128 = 0.9\n",
            "wire_efficiency.ll",
        ),
        ("syntax.toml", "[nccl\nll_max_bw = 1\n", "line 1"),
        ("type.toml", "[nccl]\nll_max_bw = \"fast\"\n", "ll_max_bw"),
    ];
    for (name, text, field) in cases {
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        let model = file.to_str().unwrap();
        let commands: [Vec<&str>; 4] = [
            vec!["simulate", &xml, "--topo", "ring:4", "--sizes", "1K"],
            vec!["--topo", "ring:4", "--coll", "allgather"],
            vec![
                "catalog",
                "--topo",
                "ring:4",
                "--colls",
                "allgather",
                "--out",
                "/nonexistent/x",
            ],
            vec![
                "bench",
                "--cases",
                "small",
                "--fabrics",
                "ring:4",
                "--coll",
                "allgather",
            ],
        ];
        for args in commands {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_synth"))
                .args(&args)
                .args(["--model", model])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?} {name}: {stderr}");
            let line = stderr.trim_end();
            assert_eq!(line.lines().count(), 1, "{args:?} {name}: {stderr}");
            assert!(line.len() <= 300 && !line.contains("panicked"), "{line}");
            assert!(
                line.contains(name) && line.contains(field),
                "{args:?}: {line}"
            );
        }
    }
}

/// The bound a simulation is skipped on ([`simulate_sizes_unless`]) is never above the
/// simulated time, under every protocol and on fabrics with switches, NICs, relays and
/// latencies; and on a ring over links of its own at 256 MB, which its links bound, it is
/// close.
#[test]
fn simulation_bounds_never_exceed_the_simulated_time() {
    for name in [
        "dgx1",
        "dgx-a100x2",
        "ring:6",
        "star:5",
        "torus-2d:4x4",
        "random:12:3",
    ] {
        let topo = topology::load(name).unwrap();
        for coll in [Collective::AllGather, Collective::AllReduce] {
            let mut programs =
                vec![baseline::ring(coll, &topo, &BaselineOptions::default()).unwrap()];
            programs.extend(baseline::tree(coll, &topo, &BaselineOptions::default()).ok());
            let sizes = [1 << 10, 1 << 20, 256 << 20];
            for p in &programs {
                for protocol in ALL_PROTOCOLS {
                    let opts = SimOptions::default().with_protocol(protocol);
                    let bounds = std::sync::Mutex::new(vec![None; sizes.len()]);
                    let runs = simulate_sizes_unless(p, &topo, &sizes, &opts, |i, b| {
                        bounds.lock().unwrap()[i] = Some(*b);
                        false
                    })
                    .unwrap();
                    let bounds = bounds.into_inner().unwrap();
                    for ((run, bound), size) in runs.iter().zip(&bounds).zip(sizes) {
                        let (run, bound) = (run.as_ref().unwrap(), bound.unwrap());
                        let at = format!("{} on {name} {protocol:?} at {size}", p.name);
                        assert_eq!(bound.size_bytes, run.size_bytes, "{at}");
                        assert!(
                            bound.time_us <= run.time_us * (1.0 + 1e-9),
                            "{at}: {bound:?} {run:?}"
                        );
                        assert!(bound.busbw >= run.busbw * (1.0 - 1e-9), "{at}");
                        let own_links = ["dgx1", "ring:6", "torus-2d:4x4"].contains(&name);
                        if own_links
                            && p.name.contains("ring")
                            && size == 256 << 20
                            && protocol == Protocol::Simple
                        {
                            assert!(
                                bound.time_us >= 0.8 * run.time_us,
                                "{at}: {bound:?} {run:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// With a bar, a candidate keeps exactly the points of its curve that beat it; the others
/// (a tie included) are `None`.
#[test]
fn a_curve_against_a_bar_keeps_exactly_the_points_that_beat_it() {
    for (name, coll) in [
        ("dgx-a100x2", Collective::AllGather),
        ("torus-2d:4x4", Collective::AllReduce),
    ] {
        let topo = topology::load(name).unwrap();
        let p = baseline::ring(coll, &topo, &BaselineOptions::default()).unwrap();
        let sizes = [1 << 10, 64 << 10, 16 << 20, 1 << 30];
        for runs in [Runs::Together, Runs::OneByOne] {
            let simulation = Simulation {
                topology: &topo,
                sizes: &sizes,
                options: SimOptions::default(),
                runs,
                protocols: &ALL_PROTOCOLS,
            };
            let curve = simulation.curve(&p).unwrap();
            for factor in [0.0, 0.5, 0.999, 1.0, 1.001, 2.0] {
                let bar: Vec<f64> = curve.iter().map(|q| q.busbw * factor).collect();
                let beating = simulation.curve_beating(&p, &bar).unwrap();
                for ((q, b), bar) in curve.iter().zip(&beating).zip(&bar) {
                    let at = format!("{name} {runs:?} factor {factor} at {}", q.size);
                    match b {
                        Some(b) => {
                            assert!(q.busbw > *bar, "{at}");
                            assert_eq!(
                                (b.time_us, b.busbw, b.protocol, b.simulated_bytes),
                                (q.time_us, q.busbw, q.protocol, q.simulated_bytes),
                                "{at}"
                            );
                        }
                        None => assert!(q.busbw <= *bar, "{at}"),
                    }
                }
            }
        }
    }
}

/// Candidates entered into a [`Race`] in any order give the table the winners of simulating
/// them all in the table's order: a later candidate's tie is dropped, an earlier one's is
/// kept (here the same program at places 0 and 2, entered last-first).
#[test]
fn a_race_in_any_order_picks_what_simulating_all_in_order_picks() {
    for (name, coll) in [
        ("dgx-a100x2", Collective::AllGather),
        ("torus-2d:4x4", Collective::AllReduce),
    ] {
        let topo = topology::load(name).unwrap();
        let ring = baseline::ring(coll, &topo, &BaselineOptions::default()).unwrap();
        let one = BaselineOptions {
            channels: Some(1),
            root: 0,
        };
        let other = baseline::ring(coll, &topo, &one).unwrap();
        let candidates = [ring.clone(), other, ring];
        let sizes = [1 << 10, 64 << 10, 16 << 20, 1 << 30];
        let simulation = Simulation {
            topology: &topo,
            sizes: &sizes,
            options: SimOptions::default(),
            runs: Runs::Together,
            protocols: &ALL_PROTOCOLS,
        };
        let curves: Vec<Vec<Option<Point>>> = (candidates.iter())
            .map(|p| simulation.curve(p).unwrap().into_iter().map(Some).collect())
            .collect();
        let winners = |curves: &[Vec<Option<Point>>]| -> Vec<Option<(usize, f64)>> {
            (0..sizes.len())
                .map(|i| {
                    let mut best: Option<(usize, f64)> = None;
                    for (c, curve) in curves.iter().enumerate() {
                        if let Some(p) = &curve[i] {
                            if p.busbw > best.map_or(0.0, |b| b.1) {
                                best = Some((c, p.busbw));
                            }
                        }
                    }
                    best
                })
                .collect()
        };
        let all = winners(&curves);
        let keys: Vec<f64> = (candidates.iter())
            .map(|p| *simulation.bound_busbw(p).unwrap().last().unwrap())
            .collect();
        for order in [vec![2, 1, 0], vec![2, 0, 1], simulation_order(&keys)] {
            let mut race = Race::new(candidates.len(), sizes.len());
            let mut raced: Vec<Vec<Option<Point>>> = vec![Vec::new(); candidates.len()];
            for &c in &order {
                raced[c] = race.enter(&simulation, c, &candidates[c]).unwrap();
            }
            assert_eq!(winners(&raced), all, "{name} order {order:?}");
            // The program at place 2 is the one at place 0: it never wins.
            assert!(all.iter().flatten().all(|w| w.0 != 2), "{name}");
        }
    }
}

/// Highest key first; equal keys in their given order.
#[test]
fn simulation_order_is_by_key_then_place() {
    assert_eq!(
        simulation_order(&[1.0, 3.0, 2.0, 3.0, f64::INFINITY]),
        vec![4, 1, 3, 2, 0]
    );
}

/// amd8's exact reduce-scatter, 38 pieces per root laid out by list scheduling (the dual of
/// its exact allgather), joins up to 7 messages in each accumulator. Reduced in the order its messages arrive, it
/// reaches the optimum (reduced by sender rank it stayed at 272 GB/s of 304: each receive
/// waited for a later message's reduction while its connection filled); so does its twin
/// with the reductions on local threadblocks (`-lr`).
#[test]
fn amd8s_exact_reduce_scatter_reaches_the_optimum_in_both_reduction_forms() {
    use std::time::{Duration, Instant};
    use synth::collective::{Collective as Coll, Kind};
    use synth::lower::{local_reduction_twin, lower_verified, LowerOptions};
    use synth::progress::Progress;
    use synth::synthesize::{synthesize_with, Method, Request, Search};
    let topo = topology::load("amd8").unwrap();
    let progress = Progress::hidden();
    let request = Request {
        topology: &topo,
        collective: Coll::new(Kind::ReduceScatter, 8, 0, 1).unwrap(),
        search: Search::Pareto,
        limits: synth::smt::Limits::new(16, 8, Instant::now() + Duration::from_secs(600)),
        progress: &progress,
    };
    let found = synthesize_with(&request, Method::Trees, None).unwrap();
    let plain = (found.algorithms.iter())
        .find(|a| a.chunks() == 38 && a.origin.family == synth::origin::Family::Listed)
        .expect("the 38-piece listed layout");
    let local = local_reduction_twin(plain).expect("accumulators join messages");
    let bound = cutbound::busbw_bound(Collective::ReduceScatter, &topo);
    for flavor in [runtime::ir::Flavor::Rccl, runtime::ir::Flavor::Nccl] {
        let options = LowerOptions {
            flavor,
            ..LowerOptions::default()
        };
        for a in [plain, &local] {
            let p = lower_verified(a, &options).unwrap();
            let busbw = simulate(&p, &topo, GB, &SimOptions::default())
                .unwrap()
                .busbw;
            assert!(
                busbw >= 0.99 * bound,
                "{flavor:?} {}: {busbw} of {bound}",
                a.name
            );
        }
    }
}
