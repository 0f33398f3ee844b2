//! NCCL topology dumps (`NCCL_TOPO_DUMP_FILE`) as topologies: imported DGX boxes bound like
//! the built-ins, a VM's collapsed NVSwitch like the bare-metal one, a PCIe-only box by
//! PCIe; `synth topo import` writes TOML that reads back; bad files fail with one line.
//!
//! The dumps in `tests/data/nccl-topo/` are condensed by hand after public dumps (NVIDIA/nccl
//! issues #1505 and #1182, nccl-tests #256): the same elements, attributes and nesting.

use std::path::Path;
use std::process::{Command, Output};

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .output()
        .expect("synth runs")
}

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/nccl-topo")
        .join(name)
        .display()
        .to_string()
}

/// A fresh scratch folder for one test, removed when the returned guard drops (also when
/// the test fails).
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("synth-nccl-topo-{name}-"))
        .tempdir()
        .unwrap()
}

/// `synth bounds --json` of `coll` on `topo` (extra arguments after), without the name.
fn bounds(topo: &str, coll: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["bounds", "--topo", topo, "--coll", coll, "--json"];
    args.extend_from_slice(extra);
    let out = synth(&args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The name, and which of several symmetric binding cuts is named, may differ.
    v.as_object_mut().unwrap().remove("topology");
    v.as_object_mut().unwrap().remove("binding_cut");
    v
}

const COLLS: [&str; 3] = ["allgather", "reducescatter", "allreduce"];

#[test]
fn dgx_dumps_bound_like_the_builtins() {
    for (file, builtin) in [
        ("dgx-a100.xml", "dgx-a100"),
        ("dgx-h100.xml", "dgx-h100"),
        ("h100-vm.xml", "dgx-h100"),
        ("dgx1.xml", "dgx1"),
    ] {
        for coll in COLLS {
            assert_eq!(
                bounds(&data(file), coll, &[]),
                bounds(builtin, coll, &[]),
                "{file} vs {builtin}, {coll}"
            );
        }
    }
}

#[test]
fn dgx_dumps_joined_bound_like_the_multinode_builtins() {
    for (file, builtin) in [
        ("dgx-a100.xml", "dgx-a100x2"),
        ("h100-vm.xml", "dgx-h100x2"),
    ] {
        for coll in COLLS {
            let imported = bounds(&data(file), coll, &["--nodes", "2"]);
            assert_eq!(imported, bounds(builtin, coll, &[]), "{file} x2, {coll}");
        }
    }
    // A rail network too.
    let imported = bounds(
        &data("dgx-h100.xml"),
        "allgather",
        &["--nodes", "2", "--network", "rail"],
    );
    assert_eq!(imported, bounds("dgx-h100x2:rail", "allgather", &[]));
}

#[test]
fn pcie_only_dump_is_bound_by_pcie() {
    // Each GPU's Gen4 x16 slot (24 GB/s) binds, both ways; no NVLink anywhere.
    for coll in ["allgather", "reducescatter"] {
        let v = bounds(&data("pcie-l40s.xml"), coll, &[]);
        assert_eq!(v["busbw_bound_gbps"], 24.0, "{coll}: {v}");
    }
    // Allreduce: the whole buffer crossing the sockets' 22 GB/s link (Sapphire Rapids) allows
    // busbw 2 x 7/8 x 22 = 38.5, but every byte is sent 2(n - 1) times in all, each time out
    // of some GPU's 24 GB/s slot: busbw at most 24, as allgather.
    let v = bounds(&data("pcie-l40s.xml"), "allreduce", &[]);
    let bw = v["busbw_bound_gbps"].as_f64().unwrap();
    assert!((bw - 24.0).abs() < 1e-6, "{v}");
}

#[test]
fn import_writes_toml_that_reads_back() {
    let tmp = temp_dir("import");
    let dir = tmp.path();
    let out_path = dir.join("my-cluster.toml");
    let out = synth(&[
        "topo",
        "import",
        &data("dgx-a100.xml"),
        "--nodes",
        "4",
        "--network",
        "fat-tree",
        "--out",
        out_path.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ranks"], 32);
    assert_eq!(report["nodes"], 4);
    assert_eq!(report["nic"]["bandwidth_gbps"], 25.0);
    // The storage NIC (mlx5_4, mlx5_5) is noted, not used.
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("mlx5_4") && notes.contains("mlx5_5"),
        "{notes}"
    );
    assert!(dir.join("my-cluster-node.toml").is_file());
    for coll in COLLS {
        assert_eq!(
            bounds(out_path.to_str().unwrap(), coll, &[]),
            bounds("dgx-a100x4", coll, &[]),
            "{coll}"
        );
    }
    // PCIe links and constraints survive the TOML.
    let pcie = dir.join("pcie.toml");
    let out = synth(&[
        "topo",
        "import",
        &data("pcie-l40s.xml"),
        "--out",
        pcie.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        bounds(pcie.to_str().unwrap(), "allgather", &[]),
        bounds(&data("pcie-l40s.xml"), "allgather", &[])
    );
    let show = synth(&["topo", "show", pcie.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(text.contains("56 directed links"), "{text}");
}

/// Asserts a failure with exit code 1 and one stderr line containing every needle.
fn fails_with(args: &[&str], needles: &[&str]) {
    let out = synth(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{args:?}: `{n}` not in {stderr}");
    }
}

#[test]
fn malformed_dumps_fail_with_line_and_element() {
    let tmp = temp_dir("bad");
    let dir = tmp.path();
    let good = std::fs::read_to_string(data("dgx-h100.xml")).unwrap();
    let cases = [
        (
            "unclosed",
            good.replace("</cpu>\n</system>", "</system>"),
            vec!["malformed XML"],
        ),
        (
            "no-sm",
            good.replacen(" sm=\"90\"", "", 1),
            vec![":7: NCCL topology: <gpu>: missing attribute sm"],
        ),
        (
            "bad-count",
            good.replacen("count=\"4\"", "count=\"many\"", 1),
            vec![":8:", "<nvlink>", "count"],
        ),
        (
            "bad-speed",
            good.replacen("speed=\"400000\"", "speed=\"-1\"", 1),
            vec!["<net>", "speed"],
        ),
        (
            "stray",
            good.replacen("<gpu dev=\"0\"", "<gpux dev=\"0\"", 1)
                .replacen("</gpu>", "</gpux>", 1),
            vec!["unexpected element <gpux>"],
        ),
        (
            "dup-dev",
            good.replacen("dev=\"1\" sm", "dev=\"0\" sm", 1),
            vec!["<gpu>", "second GPU with dev=0"],
        ),
        (
            "no-gpu",
            "<system version=\"1\"><cpu numaid=\"0\"/></system>".to_string(),
            vec!["no <gpu>"],
        ),
    ];
    for (name, text, needles) in cases {
        let path = dir.join(format!("{name}.xml"));
        std::fs::write(&path, text).unwrap();
        fails_with(&["topo", "show", path.to_str().unwrap()], &needles);
    }
    // An unknown generation's NVLinks need a rate.
    let path = dir.join("sm200.xml");
    std::fs::write(&path, good.replace("sm=\"90\"", "sm=\"200\"")).unwrap();
    fails_with(
        &["topo", "show", path.to_str().unwrap()],
        &["sm=200", "--nvlink-bandwidth"],
    );
    let out = synth(&[
        "topo",
        "import",
        path.to_str().unwrap(),
        "--nvlink-bandwidth",
        "25",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Joining nodes needs NICs.
    let bare = dir.join("bare.xml");
    let no_nics: String = good
        .lines()
        .filter(|l| !l.contains("<net ") && !l.contains("nic>"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&bare, no_nics).unwrap();
    fails_with(
        &[
            "bounds",
            "--topo",
            bare.to_str().unwrap(),
            "--coll",
            "allgather",
            "--nodes",
            "2",
        ],
        &["no NIC facts"],
    );
}

#[test]
fn nvsmi_nic_rows_join_nodes() {
    let tmp = temp_dir("nvsmi");
    let dir = tmp.path();
    let mut text = String::from(
        "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tNIC1\tNIC2\tNIC3\tCPU Affinity\n",
    );
    for g in 0..8 {
        let mut row = format!("GPU{g}");
        for h in 0..8 {
            row += if g == h { "\t X " } else { "\tNV18" };
        }
        for nic in 0..4 {
            row += if nic == g / 2 { "\tPXB" } else { "\tSYS" };
        }
        text += &row;
        text += "\t0-63\n";
    }
    text += "\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n  NIC2: mlx5_2\n  NIC3: mlx5_3\n";
    let path = dir.join("topo.txt");
    std::fs::write(&path, text).unwrap();
    let out = synth(&[
        "topo",
        "import",
        path.to_str().unwrap(),
        "--nic-bandwidth",
        "50",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml = String::from_utf8_lossy(&out.stdout);
    assert!(
        toml.contains("per_node = 4") && toml.contains("bandwidth = 50"),
        "{toml}"
    );
    // Four NICs, each shared by two GPUs: a node's NIC cut carries 4 x 25 GB/s.
    let v = bounds(path.to_str().unwrap(), "allgather", &["--nodes", "2"]);
    assert!(v["busbw_bound_gbps"].as_f64().unwrap() > 0.0, "{v}");
}
