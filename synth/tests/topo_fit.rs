//! `synth topo fit`: alpha and bandwidth recovered from nccl-tests tables generated from known
//! values (within 2%), written into the topology TOML; and real published tables fitted with
//! residuals below 5% in the bandwidth regime.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use synth::topology::fit::{self, Observation};
use synth::topology::nccl_tests::{self, Test};

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .output()
        .expect("synth runs")
}

fn data(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(path)
}

/// A fresh scratch folder for one test, removed when the returned guard drops (also when
/// the test fails).
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("synth-topo-fit-{name}-"))
        .tempdir()
        .unwrap()
}

/// nccl-tests text of `test` on `hosts` x `per_host` ranks from the ring model with `alpha`
/// (µs) and bus bandwidth `bw` (GB/s), times printed to 2 decimals as nccl-tests does.
fn table(test: Test, name: &str, hosts: usize, per_host: usize, alpha: f64, bw: f64) -> String {
    let n = hosts * per_host;
    let mut t = format!("# Collective test starting: {name}\n# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor)\n#\n# Using devices\n");
    for r in 0..n {
        t += &format!(
            "#  Rank {r:2} Group  0 Pid {} on node{} device {} [0x07] NVIDIA A100-SXM4-80GB\n",
            100 + r,
            r / per_host,
            r % per_host
        );
    }
    t += "#\n#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";
    t += "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n";
    let (hops, factor) = test.ring_model(n);
    for k in 10..34 {
        let bytes = 1u64 << k;
        let time = hops * alpha + factor * bytes as f64 / (bw * 1e3);
        let algbw = bytes as f64 / time / 1e3;
        t += &format!(
            "{bytes:>12} {:>13}     float     sum      -1 {time:>8.2} {algbw:>7.2} {:>7.2}      0 {time:>8.2} {algbw:>7.2} {:>7.2}      0\n",
            bytes / 4,
            algbw * factor,
            algbw * factor
        );
    }
    t += "# Out of bounds values : 0 OK\n";
    t
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 0.02 * want.abs(),
        "{what}: {got} vs {want}"
    );
}

#[test]
fn recovers_known_costs_and_writes_them() {
    let tmp = temp_dir("known");
    let dir = tmp.path();
    let topo = dir.join("cluster.toml");
    let xml = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nccl-topo/dgx-a100.xml");
    let out = synth(&[
        "topo",
        "import",
        xml.to_str().unwrap(),
        "--nodes",
        "2",
        "--out",
        topo.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Inside a node: 1.3 µs per hop, 230 GB/s of bus bandwidth (the model says 300).
    let ag = write(
        dir,
        "all_gather_perf.txt",
        &table(Test::AllGather, "all_gather_perf", 1, 8, 1.3, 230.0),
    );
    let ar = write(
        dir,
        "all_reduce_perf.txt",
        &table(Test::AllReduce, "all_reduce_perf", 1, 8, 1.3, 230.0),
    );
    let sr = write(
        dir,
        "sendrecv_perf.txt",
        &table(Test::SendRecv, "sendrecv_perf", 1, 2, 1.3, 230.0),
    );
    // Across two nodes: 4.5 µs per hop, 180 GB/s of the node's 8 x 25 GB/s NICs.
    let net = write(
        dir,
        "all_reduce_perf-2n.txt",
        &table(Test::AllReduce, "all_reduce_perf", 2, 8, 4.5, 180.0),
    );
    let out = synth(&[
        "topo",
        "fit",
        &ag,
        &ar,
        &sr,
        &net,
        "--topo",
        topo.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let classes = v["classes"].as_array().unwrap();
    let class = |name: &str| {
        classes
            .iter()
            .find(|c| c["class"] == name)
            .unwrap_or_else(|| panic!("{name} in {v}"))
    };
    close(
        class("nvlink")["alpha_us"].as_f64().unwrap(),
        1.3,
        "nvlink alpha",
    );
    close(
        class("nvlink")["bandwidth_scale"].as_f64().unwrap(),
        230.0 / 300.0,
        "nvlink scale",
    );
    close(class("net")["alpha_us"].as_f64().unwrap(), 4.5, "net alpha");
    close(
        class("net")["bandwidth_scale"].as_f64().unwrap(),
        180.0 / 200.0,
        "net scale",
    );
    for c in classes {
        assert!(c["max_residual"].as_f64().unwrap() < 0.02, "{c}");
        for t in c["tables"].as_array().unwrap() {
            close(
                t["alpha_us"].as_f64().unwrap(),
                c["alpha_us"].as_f64().unwrap(),
                "per-table alpha",
            );
        }
    }
    // Written: the node's NVSwitch port and alpha, the cluster's NIC bandwidth and alpha.
    let node = std::fs::read_to_string(dir.join("cluster-node.toml")).unwrap();
    let node: toml::Value = toml::from_str(&node).unwrap();
    close(
        node["nvswitch"]["bandwidth"].as_float().unwrap(),
        230.0,
        "written port",
    );
    close(
        node["nvswitch"]["alpha"].as_float().unwrap(),
        1.3,
        "written alpha",
    );
    let cluster: toml::Value = toml::from_str(&std::fs::read_to_string(&topo).unwrap()).unwrap();
    close(
        cluster["multinode"]["nic_bandwidth"].as_float().unwrap(),
        22.5,
        "written NIC",
    );
    close(
        cluster["multinode"]["nic_alpha"].as_float().unwrap(),
        4.5,
        "written NIC alpha",
    );
    // The fitted file still loads, and bounds follow the new costs.
    let b = synth(&[
        "bounds",
        "--topo",
        topo.to_str().unwrap(),
        "--coll",
        "allgather",
        "--json",
    ]);
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
}

#[test]
fn pcie_class_scales_every_pcie_link() {
    let tmp = temp_dir("pcie");
    let dir = tmp.path();
    let topo = dir.join("box.toml");
    let xml = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nccl-topo/pcie-l40s.xml");
    let out = synth(&[
        "topo",
        "import",
        xml.to_str().unwrap(),
        "--out",
        topo.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The model's allgather bound is 24 GB/s; measured 20.
    let ag = write(
        dir,
        "all_gather_perf.txt",
        &table(Test::AllGather, "all_gather_perf", 1, 8, 3.0, 20.0),
    );
    let out = synth(&[
        "topo",
        "fit",
        &ag,
        "--topo",
        topo.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["classes"][0]["class"], "pcie");
    close(
        v["classes"][0]["alpha_us"].as_f64().unwrap(),
        3.0,
        "pcie alpha",
    );
    let b = synth(&[
        "bounds",
        "--topo",
        topo.to_str().unwrap(),
        "--coll",
        "allgather",
        "--json",
    ]);
    let b: serde_json::Value = serde_json::from_slice(&b.stdout).unwrap();
    close(
        b["busbw_bound_gbps"].as_f64().unwrap(),
        20.0,
        "refitted bound",
    );
}

#[test]
fn real_tables_fit_within_five_percent() {
    for (file, min_bytes) in [
        ("all_reduce_perf-8x-large.txt", 0.0),
        ("all_reduce_perf-8x-small.txt", 8.0 * 1048576.0),
    ] {
        let text = std::fs::read_to_string(data(&format!("nccl-tests/{file}"))).unwrap();
        let t = nccl_tests::read(&text, file).unwrap();
        assert_eq!(
            (t.test, t.ranks, t.ranks_from),
            (Test::AllReduce, 8, "busbw/algbw"),
            "{file}"
        );
        let (hops, factor) = t.test.ring_model(t.ranks);
        let obs: Vec<Observation> = t
            .rows
            .iter()
            .filter(|r| r.bytes >= min_bytes)
            .map(|r| Observation {
                hops,
                load_us: factor * r.bytes / 1e3,
                time_us: r.time_us,
            })
            .collect();
        let f = fit::fit(&obs).unwrap();
        assert!(f.max < 0.05, "{file}: {f:?}");
        // Busbw of the fit within the table's own range.
        assert!(f.scale > 50.0 && f.scale < 500.0, "{file}: {f:?}");
    }
}

#[test]
fn bad_tables_fail_with_one_line() {
    let tmp = temp_dir("bad");
    let dir = tmp.path();
    let topo = dir.join("node.toml");
    let xml = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nccl-topo/dgx-h100.xml");
    assert!(synth(&[
        "topo",
        "import",
        xml.to_str().unwrap(),
        "--out",
        topo.to_str().unwrap()
    ])
    .status
    .success());
    let good = table(Test::AllGather, "all_gather_perf", 1, 8, 1.0, 300.0);
    let cases = [
        (
            "garbled.txt",
            good.replacen(
                "     float     sum      -1 ",
                "     float     sum      -1 zz",
                1,
            ),
            "time 'zz",
        ),
        (
            "unknown.txt",
            good.replace("# Collective test starting: all_gather_perf\n", ""),
            "cannot tell which",
        ),
        (
            "all_gather_4.txt",
            table(Test::AllGather, "all_gather_perf", 1, 4, 1.0, 300.0),
            "the node has 8",
        ),
    ];
    for (name, text, needle) in cases {
        let p = write(dir, name, &text);
        let out = synth(&["topo", "fit", &p, "--topo", topo.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(needle), "{name}: `{needle}` not in {err}");
    }
}
