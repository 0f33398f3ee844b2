//! msccl-tools' MSCCLang API beyond the basics, in programs of our own
//! (`tests/dsl_api/`): `Ref.get_dst_rank/get_dst_index/get_origin_rank/get_origin_index/
//! print_chunk_info`, `group` of a span in either order, `msccl.collectives`,
//! `msccl.topologies.nvidia`, the in-place allgather slot named from the sender, a custom
//! collective marked in place (buffers kept apart), two programs with one name, instances
//! of manual and automatic threadblocks that stay deadlock-free (recursive doubling and
//! halving, whose operations span rank slices), and the automatic channels of a two-level
//! allreduce, local copies on a threadblock of their own, and manual threadblocks listed in
//! program order where listing by priority fills a connection. Each compiles, verifies and
//! runs with #wrong 0 with 1, 2 and 4 instances in every flavour that loads it.

use runtime::cpu::{run, DataType, RunOptions};
use runtime::ir::{Buffer, Collective, Flavor, Program};
use std::path::Path;
use std::process::Command;
use synth::dsl::frontend::{run_script, DEFAULT_TIME_LIMIT};
use synth::dsl::trace::{replay, Overrides};

/// A fresh scratch folder for one test, removed when the returned guard drops (also when
/// the test fails).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("synth-dsl-{name}-"))
        .tempdir()
        .unwrap()
}

fn program(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/dsl_api")
        .join(name)
        .display()
        .to_string()
}

fn compile(name: &str, args: &[String], flavor: Flavor) -> Program {
    let traced = run_script(&program(name), args, DEFAULT_TIME_LIMIT)
        .unwrap_or_else(|e| panic!("{name} {args:?}: {e:#}"));
    assert_eq!(traced.len(), 1);
    let overrides = Overrides {
        flavor: Some(flavor),
        ..Overrides::default()
    };
    let r = replay(&traced[0], &overrides).unwrap_or_else(|e| panic!("{name}: {e:#}"));
    for c in &r.checks {
        c.clone()
            .unwrap_or_else(|e| panic!("{name} {args:?}: Check(): {e}"));
    }
    r.program
        .compile()
        .unwrap_or_else(|e| panic!("{name} {args:?} {flavor:?}: {e}"))
}

const PROGRAMS: [(&str, &[&str]); 14] = [
    ("alltoall_by_destination.py", &["4"]),
    // Operations of several chunks whose copies would span rank slices: compiled as one copy
    // (copies would cut every transfer into pieces). Both ends of a threadblock send and
    // receive.
    ("allgather_doubling.py", &["8", "manual"]),
    ("allgather_doubling.py", &["8", "auto"]),
    ("allreduce_halving_doubling.py", &["8"]),
    ("allreduce_two_level.py", &["4", "2", "auto"]),
    ("allreduce_two_level.py", &["8", "2", "auto"]),
    // Manual threadblocks, copies slice after slice: with 2 and 4 instances each send stays
    // one message (cut into single chunks, both ranks' sends filled the connections).
    ("allreduce_pairs_blocked.py", &["4", "blocked"]),
    // Interleaved, its copies would cut transfers (and deadlocked): synth lays them out slice
    // after slice.
    ("allreduce_pairs_blocked.py", &["4", "interleaved"]),
    ("allgather_inplace_dgx1.py", &[]),
    ("custom_inplace_tonext.py", &["4"]),
    // copy(dst, Buffer.input, -1) in place: the slot before the sender's slice.
    ("allgather_pairs_minus_one.py", &["4"]),
    ("allgather_pairs_minus_one.py", &["8"]),
    // Local copies with no producer on their own threadblock (automatic policy).
    ("allgather_ring_backward.py", &["4", "2"]),
    // Listed by priority, its sends fill a connection: listed again in program order.
    ("sends_in_program_order.py", &[]),
];

#[test]
fn api_programs_verify_and_run_with_1_2_and_4_instances_in_every_flavour() {
    for (name, args) in PROGRAMS {
        for instances in ["1", "2", "4"] {
            let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            all.push(instances.to_string());
            for flavor in Flavor::ALL {
                let p = compile(name, &all, flavor);
                if p.collective == Collective::Custom {
                    // msccl-tools keeps a custom collective's buffers apart: out of place.
                    assert!(!p.inplace && p.outofplace, "{name}");
                    if flavor != Flavor::Legacy {
                        continue; // only the legacy runtime loads coll="custom"
                    }
                }
                let xml = runtime::xml::write(&p, flavor)
                    .unwrap_or_else(|e| panic!("{name} x{instances} {flavor:?}: {e}"));
                let back = runtime::xml::read_str(&xml).expect("our XML reads back");
                runtime::verify::verify(&back).expect("the XML verifies");
                for inplace in back.modes() {
                    let opts = RunOptions {
                        inplace,
                        iters: 1,
                        warmup: 0,
                        ..RunOptions::for_bytes(&back, 64 << 10, DataType::F32)
                    };
                    let report = run(&back, &opts).expect("the CPU executor runs it");
                    assert_eq!(report.wrong, 0, "{name} x{instances} {flavor:?}");
                }
            }
        }
    }
}

/// The in-place allgather's first hop, `copy(dst, Buffer.input, 0)`, lands in the sender's
/// output slice on `dst` (msccl-tools): rank 0's chunks reach rank 1's output slots 0 and 1.
#[test]
fn in_place_allgather_input_slot_is_the_senders() {
    let p = compile(
        "allgather_inplace_dgx1.py",
        &["1".to_string()],
        Flavor::Nccl,
    );
    assert!(p.inplace);
    // Every chunk reaches rank 1 from rank 0 (the ring's previous rank), on threadblocks of
    // several channels; none lands in rank 1's own slice (slots 2 and 3).
    let from_0: Vec<(runtime::ir::Buffer, usize)> = p.gpus[1]
        .threadblocks
        .iter()
        .filter(|tb| tb.recv == Some(0))
        .flat_map(|tb| &tb.steps)
        .filter(|s| s.op.receives())
        .map(|s| (s.dst.buffer, s.dst.offset))
        .collect();
    assert!(
        from_0.contains(&(runtime::ir::Buffer::Output, 0)),
        "{from_0:?}"
    );
    assert!(
        from_0.iter().all(|&(_, o)| !(2..4).contains(&o)),
        "{from_0:?}"
    );
}

#[test]
fn two_programs_with_one_name_get_a_file_each() {
    let tmp = scratch("api-twice");
    let dir = tmp.path();
    let out = Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(["compile", &program("same_name_twice.py"), "--out"])
        .arg(dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "another program of this script is named `twice`: this one is written as twice-2.xml"
        ),
        "{stderr}"
    );
    let first = runtime::xml::read_file(dir.join("twice.xml")).unwrap();
    let second = runtime::xml::read_file(dir.join("twice-2.xml")).unwrap();
    assert_ne!(
        first.step_count(),
        second.step_count(),
        "two different programs"
    );
}

/// Busbw (GB/s) of `xml` simulated on `topo` at `size`, and the allreduce bound there.
fn simulated(xml: &Path, topo: &str, size: &str) -> (f64, f64) {
    let out = Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(["simulate", "--json", "--topo", topo, "--sizes", size])
        .arg(xml)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &v["rows"][0];
    (
        row["busbw"].as_f64().unwrap(),
        row["bound_busbw"].as_f64().unwrap(),
    )
}

/// The automatic schedule of the two-level allreduce on two DGX-A100 gives each flow of
/// chained transfers channels of its own (24 channels, as msccl-tools assigns them; packing
/// them into few channels reached 0.51 of the bound at 1 GB): it reaches 0.85 of the
/// allreduce bound at 1 GB (0.8 asserted), and is at least as fast as the program's
/// hand-pinned channels at 1 MB and 1 GB with 1 instance, and within 0.98 of them with 2
/// and 4 (two copies of 24 channels exceed the runtimes' 32, so it makes one copy; squeezing
/// each copy into 16 channels reached 0.56 of the pinned channels at 1 GB).
#[test]
fn two_level_allreduce_auto_channels_reach_the_bound_and_match_manual() {
    let tmp = scratch("two-level");
    let dir = tmp.path();
    for instances in ["1", "2", "4"] {
        let mut xml = Vec::new();
        for schedule in ["auto", "manual"] {
            let out_dir = dir.join(format!("{schedule}-{instances}"));
            let out = Command::new(env!("CARGO_BIN_EXE_synth"))
                .args(["compile", &program("allreduce_two_level.py"), "--out"])
                .arg(&out_dir)
                .args(["--", "8", "2", schedule, instances])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            xml.push(out_dir.join("allreduce_two_level.xml"));
        }
        let auto = runtime::xml::read_file(&xml[0]).unwrap();
        let channels = |p: &Program| {
            let chans = p
                .gpus
                .iter()
                .flat_map(|g| &g.threadblocks)
                .map(|t| t.channel);
            chans.max().unwrap() + 1
        };
        assert_eq!(channels(&auto), 24, "{instances} instances");
        let least = if instances == "1" { 0.999 } else { 0.98 };
        for size in ["1M", "1G"] {
            let (a, bound) = simulated(&xml[0], "dgx-a100x2", size);
            let (m, _) = simulated(&xml[1], "dgx-a100x2", size);
            assert!(
                a >= m * least,
                "{instances} instances, {size}: auto {a:.1} GB/s < {least} x manual {m:.1} GB/s"
            );
            if size == "1G" {
                assert!(
                    a >= 0.8 * bound,
                    "1G: auto {a:.1} GB/s, bound {bound:.1} GB/s"
                );
            }
        }
    }
}

/// Copies of manual-threadblock programs whose transfers move several chunks are at least as
/// fast as one instance in the simulator (dgx-a100, 1 MB and 1 GB), with 2 and 4 instances.
/// Recursive halving/doubling allreduce: its copies go slice after slice (each transfer stays
/// one message), one channel per copy. Recursive-doubling allgather: no slot layout keeps its
/// transfers whole (they span rank slices), so it is compiled as one copy; cutting each
/// transfer into one message per chunk gave 231 GB/s at 1 GB against 297 for one instance.
#[test]
fn manual_copies_keep_transfers_whole_and_lose_no_bandwidth() {
    let tmp = scratch("manual-copies");
    let dir = tmp.path();
    let cases: [(&str, &[&str], &str); 2] = [
        (
            "allreduce_halving_doubling.py",
            &["8"],
            "allreduce_halving_doubling.xml",
        ),
        (
            "allgather_doubling.py",
            &["8", "manual"],
            "allgather_doubling.xml",
        ),
    ];
    for (name, args, xml_name) in cases {
        let mut xml = Vec::new();
        for instances in ["1", "2", "4"] {
            let out_dir = dir.join(format!("{name}-{instances}"));
            let out = Command::new(env!("CARGO_BIN_EXE_synth"))
                .args(["compile", &program(name), "--out"])
                .arg(&out_dir)
                .arg("--")
                .args(args)
                .arg(instances)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            xml.push(out_dir.join(xml_name));
        }
        let channels = |p: &Path| {
            let p = runtime::xml::read_file(p).unwrap();
            let chans = p.gpus.iter().flat_map(|g| &g.threadblocks);
            chans.map(|t| t.channel).max().unwrap() + 1
        };
        let copies = if name.starts_with("allreduce") {
            [1, 2, 4]
        } else {
            [1, 1, 1]
        };
        for (x, c) in xml.iter().zip(copies) {
            assert_eq!(channels(x), c, "{name} {}", x.display());
        }
        for size in ["1M", "1G"] {
            let (one, _) = simulated(&xml[0], "dgx-a100", size);
            for x in &xml[1..] {
                let (many, _) = simulated(x, "dgx-a100", size);
                assert!(
                    many >= one * 0.999,
                    "{name} {size} {}: {many:.1} GB/s < one instance {one:.1} GB/s",
                    x.display()
                );
            }
        }
    }
}

/// Automatic threadblocks: a local copy that needs no message (an input chunk into the
/// rank's own output) runs on a threadblock with no peer, beside the transfers (as
/// msccl-tools places it), and copies of the program are as fast as one instance in the
/// simulator (fully-connected:4, 1 MB and 1 GB). On the first threadblock of the transfers
/// the copy delayed them: 24.78, 24.57 and 24.15 GB/s at 1 GB with 1, 2 and 4 instances,
/// against 24.99 for each now.
#[test]
fn local_copies_run_beside_the_transfers() {
    let tmp = scratch("local-tb");
    let dir = tmp.path();
    let mut xml = Vec::new();
    for instances in ["1", "2", "4"] {
        let out_dir = dir.join(instances);
        let out = Command::new(env!("CARGO_BIN_EXE_synth"))
            .args(["compile", &program("allgather_ring_backward.py"), "--out"])
            .arg(&out_dir)
            .args(["--", "4", "2", instances])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = out_dir.join("allgather_ring_backward.xml");
        let p = runtime::xml::read_file(&path).unwrap();
        for g in &p.gpus {
            for t in &g.threadblocks {
                let local = t.steps.iter().any(|s| s.src.buffer == Buffer::Input);
                assert!(
                    !local || (t.send.is_none() && t.recv.is_none()),
                    "x{instances}: rank {} copies its input on a threadblock with peers",
                    g.rank
                );
            }
        }
        xml.push(path);
    }
    for size in ["1M", "1G"] {
        let (one, _) = simulated(&xml[0], "fully-connected:4", size);
        for x in &xml[1..] {
            let (many, _) = simulated(x, "fully-connected:4", size);
            assert!(
                many >= one * 0.999,
                "{size} {}: {many:.2} GB/s < one instance {one:.2} GB/s",
                x.display()
            );
        }
    }
}
