//! The simulator, the NCCL baselines, NCCL's model and the cut bounds.

use runtime::ir::{Buffer, Collective, Gpu, Op, Program, Protocol, Slot, Step, Threadblock};
use synth::baseline::{self, Algo, BaselineOptions};
use synth::cutbound::{self, CutBound};
use synth::simulate::{simulate, simulate_sizes, SimOptions, Slicing};
use synth::topology::{self, Link, SwitchConstraint, Topology};

const GB: u64 = 1 << 30;

fn whole() -> SimOptions {
    SimOptions {
        slicing: Slicing::WholeChunks,
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
    // 300 GB/s port, so busbw = 2(n-1)/n · S / t ≤ 2·7/8·300 = 525. (The classical
    // 2(n-1)/n·S per rank is no bound: a star or line allreduce beats it.)
    let one = topology::load("dgx-a100").unwrap();
    assert!((cutbound::busbw_bound(Collective::AllReduce, &one) - 525.0).abs() < 1e-6);
    // Time bound grows with size and is at least one latency.
    let t1 = cutbound::time_bound_us(Collective::AllGather, &topo, 1 << 10);
    let t2 = cutbound::time_bound_us(Collective::AllGather, &topo, GB);
    assert!(t1 >= 0.7 && t2 > t1);
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
    let small =
        baseline::nccl_model_time_us(Collective::AllReduce, Algo::Ring, &topo, 1024).unwrap();
    let big = baseline::nccl_model_time_us(Collective::AllReduce, Algo::Ring, &topo, GB).unwrap();
    assert!(small > 8.4 && big > small);
    // At 1 GiB the ring runs near its bus bandwidth (200 GB/s on 8 NICs).
    let busbw = GB as f64 / (big * 1e3) * Collective::AllReduce.busbw_factor(16);
    assert!(busbw > 180.0 && busbw <= 200.0, "{busbw}");
    assert!(baseline::nccl_model_time_us(Collective::AllGather, Algo::Tree, &topo, GB).is_err());
    assert!(baseline::nccl_model_time_us(Collective::AllToAll, Algo::Ring, &topo, GB).is_err());
    let (_, algo) = baseline::nccl_model_busbw(Collective::AllReduce, &topo, GB).unwrap();
    assert_eq!(algo, Algo::Ring);
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
    let dir = std::env::temp_dir().join(format!("synth-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
    std::fs::remove_dir_all(&dir).ok();
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
    let dir = std::env::temp_dir().join(format!("synth-sim-rings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
