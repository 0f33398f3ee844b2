//! Topology loading and analysis: built-ins, hand-written TOML, nvidia-smi import, errors.

use synth::topology::{builtin_names, load, parse_nvsmi, NvsmiOptions, Topology};

const DGX1_MATRIX: [[u32; 8]; 8] = [
    [0, 2, 1, 1, 2, 0, 0, 0],
    [2, 0, 1, 2, 0, 1, 0, 0],
    [1, 1, 0, 2, 0, 0, 2, 0],
    [1, 2, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2, 1, 1],
    [0, 1, 0, 0, 2, 0, 1, 2],
    [0, 0, 2, 0, 1, 1, 0, 2],
    [0, 0, 0, 1, 1, 2, 2, 0],
];

/// A fresh scratch folder for one test, removed when the returned guard drops (also when
/// the test fails).
fn scratch(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("synth-topology-{test}-"))
        .tempdir()
        .unwrap()
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn assert_multiplicities(t: &Topology, unit: f64) {
    for (i, row) in DGX1_MATRIX.iter().enumerate() {
        for (j, &k) in row.iter().enumerate() {
            let got = t.link(i, j).map_or(0.0, |l| l.bandwidth);
            assert_eq!(got, k as f64 * unit, "link {i}->{j}");
        }
    }
}

#[test]
fn every_builtin_loads_and_validates() {
    let names = builtin_names();
    for required in [
        "ring",
        "line",
        "fully-connected",
        "star",
        "hub-and-spoke",
        "shared-hub",
        "torus-2d",
        "dgx1",
        "ndv2",
        "dgx2",
        "dgx-a100",
        "dgx-h100",
        "amd4",
        "amd8",
        "mi250",
        "dgx-a100x2",
        "dgx-a100x4",
        "dgx-h100x2",
        "ndv2x2",
        "dgx2x2",
    ] {
        assert!(names.iter().any(|n| n.0 == required), "{required} missing");
    }
    for (name, description) in names {
        assert!(!description.is_empty());
        let t = load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        t.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(t.unreachable_pairs().is_empty(), "{name} is disconnected");
        assert!(t.capacities().is_ok(), "{name}: no integer capacities");
        assert!(t.to_dot().starts_with("digraph"));
        let s = t.summary();
        assert_eq!(s.ranks, t.ranks);
        assert!(!s.to_string().is_empty());
        serde_json::to_string(&s).unwrap();
    }
}

#[test]
fn dgx1_facts() {
    let t = load("dgx1").unwrap();
    assert_eq!(t.ranks, 8);
    assert_eq!(t.diameter(), Some(2));
    assert_eq!(t.automorphism_count(1000), (4, true));
    assert_eq!(t.automorphisms(100).len(), 4);
    assert_multiplicities(&t, 25.0);
    for r in 0..8 {
        let nvlinks: f64 = t
            .links
            .iter()
            .filter(|l| l.src == r)
            .map(|l| l.bandwidth / 25.0)
            .sum();
        assert_eq!(nvlinks, 6.0);
        assert_eq!(t.rank_bandwidth(r), (150.0, 150.0));
    }
    let c = t.capacities().unwrap();
    assert_eq!(c.unit_gbps, 25.0);
    let mut caps = c.links.clone();
    caps.sort_unstable();
    caps.dedup();
    assert_eq!(caps, vec![1, 2]);
    for (l, &k) in t.links.iter().zip(&c.links) {
        assert_eq!(k, DGX1_MATRIX[l.src][l.dst]);
    }
    let text = t.summary().to_string();
    assert!(text.contains("diameter 2"), "{text}");
    assert!(text.contains("automorphisms 4"), "{text}");
    let dot = t.to_dot();
    assert!(dot.contains("50 GB/s") && dot.contains("25 GB/s"), "{dot}");
}

#[test]
fn nvswitch_boxes() {
    let a100 = load("dgx-a100").unwrap();
    assert_eq!(a100.automorphism_count(100_000), (40320, true));
    assert_eq!(a100.automorphism_group_order(), Some(40320));
    for r in 0..8 {
        assert_eq!(a100.rank_bandwidth(r), (300.0, 300.0));
    }
    assert_eq!(a100.switches.len(), 16);
    let h100 = load("dgx-h100").unwrap();
    assert_eq!(h100.rank_bandwidth(3), (450.0, 450.0));
    let dgx2 = load("dgx2").unwrap();
    assert_eq!((dgx2.ranks, dgx2.rank_bandwidth(0)), (16, (150.0, 150.0)));
    assert_eq!(dgx2.diameter(), Some(1));
}

#[test]
fn multinode_builtins() {
    let t = load("dgx-a100x2").unwrap();
    assert_eq!((t.ranks, t.nodes()), (16, 2));
    assert_eq!(t.node_of[7], 0);
    assert_eq!(t.node_of[8], 1);
    let nics: Vec<_> = t
        .switches
        .iter()
        .filter(|s| s.name.contains("nic"))
        .collect();
    assert_eq!(nics.len(), 32);
    assert!(nics.iter().all(|s| s.bandwidth == 25.0));
    let out0 = nics.iter().find(|s| s.name == "n0-nic0-out").unwrap();
    assert_eq!(out0.srcs, vec![0]);
    assert_eq!(out0.dsts, (8..16).collect::<Vec<_>>());
    assert_eq!(t.link(0, 9).unwrap().alpha, 2.6);
    assert_eq!(t.link(0, 1).unwrap().alpha, 0.7);
    assert_eq!(t.rank_bandwidth(0), (325.0, 325.0));
    let c = t.capacities().unwrap();
    assert_eq!(c.unit_gbps, 25.0);
    assert_eq!(t.automorphism_count(10), (10, false));

    let rail = load("dgx-a100x4:rail").unwrap();
    assert_eq!(rail.ranks, 32);
    assert!(rail.link(0, 8).is_some() && rail.link(0, 9).is_none());
    assert_eq!(rail.diameter(), Some(2));

    let ndv2 = load("ndv2x2").unwrap();
    let shared: Vec<_> = ndv2
        .switches
        .iter()
        .filter(|s| s.name.contains("nic"))
        .collect();
    assert_eq!(shared.len(), 4);
    assert!(shared.iter().all(|s| s.bandwidth == 12.5));
    assert_eq!(ndv2.rank_bandwidth(0).1, 162.5);
    assert_eq!(
        load("dgx-h100x2").unwrap().link(0, 8).unwrap().bandwidth,
        50.0
    );
    assert_eq!(load("dgx2x2").unwrap().ranks, 32);
}

#[test]
fn generator_sizes() {
    let torus = load("torus-2d:4x4").unwrap();
    assert_eq!((torus.ranks, torus.links.len()), (16, 64));
    assert_eq!(torus.name, "torus-2d:4x4");
    assert!((0..16).all(|r| torus.out_neighbors(r).len() == 4));
    assert_eq!(torus.diameter(), Some(4));
    let ring = load("ring:8").unwrap();
    assert_eq!((ring.ranks, ring.links.len()), (8, 16));
    assert_eq!(ring.automorphism_count(1000), (16, true));
    assert_eq!(ring.diameter(), Some(4));
    assert_eq!(load("ring").unwrap().ranks, 8);
    assert_eq!(load("torus-2d").unwrap().ranks, 16);
    assert_eq!(load("line:5").unwrap().diameter(), Some(4));
    assert_eq!(load("fully-connected:4").unwrap().links.len(), 12);
    assert_eq!(load("star:6").unwrap().diameter(), Some(2));
    assert_eq!(
        load("hub-and-spoke:4").unwrap().rank_bandwidth(0),
        (25.0, 25.0)
    );
    assert_eq!(
        load("shared-hub:4").unwrap().rank_bandwidth(0),
        (25.0, 25.0)
    );
}

#[test]
fn hand_written_toml_with_every_feature() {
    let tmp = scratch("features");
    let dir = tmp.path();
    let features = write(
        dir,
        "features.toml",
        r#"
name = "hand"
ranks = 6
bandwidth = 10
alpha = 0.5
matrix = [
  [0, 2, 1, 0, 0, 0],
  [2, 0, 0, 1, 0, 0],
  [1, 0, 0, 2, 0, 0],
  [0, 1, 2, 0, 0, 0],
  [0, 0, 0, 0, 0, 0],
  [0, 0, 0, 0, 0, 0],
]
nvswitch = { bandwidth = 30, ranks = [4, 5] }

[[link]]
src = 3
dst = 4
bandwidth = 5

[[link]]
src = 0
dst = 5
alpha = 2.0
bidirectional = false

[[link]]
src = 5
dst = 0
bandwidth = 20
bidirectional = false

[[switch]]
name = "pcie"
srcs = [0, 1]
dsts = [2, 3]
bandwidth = 15
"#,
    );
    let t = load(&features).unwrap();
    assert_eq!(t.name, "hand");
    assert_eq!(t.link(0, 1).unwrap().bandwidth, 20.0);
    assert_eq!(t.link(0, 2).unwrap().alpha, 0.5);
    assert_eq!(t.link(4, 5).unwrap().bandwidth, 30.0);
    assert_eq!(t.link(4, 3).unwrap().bandwidth, 5.0);
    assert_eq!(
        (t.link(0, 5).unwrap().bandwidth, t.link(0, 5).unwrap().alpha),
        (10.0, 2.0)
    );
    assert_eq!(t.link(5, 0).unwrap().bandwidth, 20.0);
    assert_eq!(t.switches.len(), 5);
    let pcie = t.switches.iter().find(|s| s.name == "pcie").unwrap();
    assert!(pcie.covers(1, 3) && !pcie.covers(3, 1));
    assert_eq!(t.diameter(), Some(2));
    let c = t.capacities().unwrap();
    assert_eq!(c.unit_gbps, 5.0);

    let generator = write(
        dir,
        "gen.toml",
        "generator = \"torus-2d\"\nsize = \"2x3\"\nbandwidth = 50\n[[link]]\nsrc = 0\ndst = 4\n",
    );
    let g = load(&generator).unwrap();
    assert_eq!((g.name.as_str(), g.ranks), ("torus-2d:2x3", 6));
    assert_eq!(g.link(4, 0).unwrap().bandwidth, 50.0);
    assert_eq!(g.diameter(), Some(2));

    write(
        dir,
        "node.toml",
        "name = \"quad\"\ngenerator = \"ring\"\nsize = 4\n[nic]\nbandwidth = 12.5\nper_node = 2\n",
    );
    let multi = write(
        dir,
        "multi.toml",
        "name = \"quads\"\n[multinode]\nnode = \"node.toml\"\nnodes = 3\nnic_alpha = 3.0\nnetwork = \"rail\"\n",
    );
    let m = load(&multi).unwrap();
    assert_eq!((m.name.as_str(), m.ranks, m.nodes()), ("quads", 12, 3));
    assert!(m.link(1, 5).is_some() && m.link(1, 9).is_some() && m.link(1, 6).is_none());
    assert_eq!(m.link(1, 5).unwrap().alpha, 3.0);
    let nics = m.switches.iter().filter(|s| s.name.contains("nic")).count();
    assert_eq!(nics, 3 * 2 * 2);
    let n0 = m.switches.iter().find(|s| s.name == "n0-nic1-out").unwrap();
    assert_eq!((n0.srcs.clone(), n0.bandwidth), (vec![2, 3], 12.5));

    let builtin_node = write(
        dir,
        "amd.toml",
        "[multinode]\nnode = \"amd4\"\nnodes = 2\nnic_bandwidth = 25\nnics_per_gpu = 2\n",
    );
    let a = load(&builtin_node).unwrap();
    assert_eq!(a.name, "amd4x2");
    assert_eq!(a.link(0, 4).unwrap().bandwidth, 50.0);
}

/// `nvidia-smi topo -m` as printed on a DGX-1 (GPU rows, NIC columns and rows, legend).
const DGX1_TOPO_M: &str = "\
\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tmlx5_0\tmlx5_2\tmlx5_1\tmlx5_3\tCPU Affinity
GPU0\t X \tNV2\tNV1\tNV1\tNV2\tSYS\tSYS\tSYS\tPIX\tSYS\tPHB\tSYS\t0-19,40-59
GPU1\tNV2\t X \tNV1\tNV2\tSYS\tNV1\tSYS\tSYS\tPIX\tSYS\tPHB\tSYS\t0-19,40-59
GPU2\tNV1\tNV1\t X \tNV2\tSYS\tSYS\tNV2\tSYS\tPHB\tSYS\tPIX\tSYS\t0-19,40-59
GPU3\tNV1\tNV2\tNV2\t X \tSYS\tSYS\tSYS\tNV1\tPHB\tSYS\tPIX\tSYS\t0-19,40-59
GPU4\tNV2\tSYS\tSYS\tSYS\t X \tNV2\tNV1\tNV1\tSYS\tPIX\tSYS\tPHB\t20-39,60-79
GPU5\tSYS\tNV1\tSYS\tSYS\tNV2\t X \tNV1\tNV2\tSYS\tPIX\tSYS\tPHB\t20-39,60-79
GPU6\tSYS\tSYS\tNV2\tSYS\tNV1\tNV1\t X \tNV2\tSYS\tPHB\tSYS\tPIX\t20-39,60-79
GPU7\tSYS\tSYS\tSYS\tNV1\tNV1\tNV2\tNV2\t X \tSYS\tPHB\tSYS\tPIX\t20-39,60-79
mlx5_0\tPIX\tPIX\tPHB\tPHB\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tPHB\tSYS\t
mlx5_2\tSYS\tSYS\tSYS\tSYS\tPIX\tPIX\tPHB\tPHB\tSYS\t X \tSYS\tPHB\t
mlx5_1\tPHB\tPHB\tPIX\tPIX\tSYS\tSYS\tSYS\tSYS\tPHB\tSYS\t X \tSYS\t
mlx5_3\tSYS\tSYS\tSYS\tSYS\tPHB\tPHB\tPIX\tPIX\tSYS\tPHB\tSYS\t X \t

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
";

#[test]
fn nvidia_smi_import() {
    let t = parse_nvsmi(DGX1_TOPO_M, "dgx1-smi", &NvsmiOptions::default()).unwrap();
    assert_eq!(t.ranks, 8);
    assert!(t.switches.is_empty());
    assert_multiplicities(&t, 25.0);
    assert_eq!(t.automorphism_count(100), (4, true));

    let tmp = scratch("nvsmi");
    let dir = tmp.path();
    let path = write(dir, "topo.txt", DGX1_TOPO_M);
    let detected = load(&path).unwrap();
    assert_eq!(detected.name, "topo");
    assert_multiplicities(&detected, 25.0);
    let explicit = load(&format!("nvsmi:{path}")).unwrap();
    assert_eq!(explicit.links, detected.links);
    let faster = load(&format!("nvsmi:50:{path}")).unwrap();
    assert_multiplicities(&faster, 50.0);

    let broken = DGX1_TOPO_M.replace("GPU3\tNV1\tNV2\tNV2", "GPU3\tNV1\tNV2\tNVx");
    let bad = write(dir, "bad.txt", &broken);
    let e = load(&bad).unwrap_err().to_string();
    assert!(e.contains("bad.txt:5:") && e.contains("NVx"), "{e}");
}

/// Loads `text` from a file and returns the error message, checking it is one line.
fn error_of(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = write(dir, name, text);
    let e = load(&path).expect_err("should fail").to_string();
    assert!(!e.contains('\n'), "not one line: {e}");
    assert!(e.contains(name), "does not name the file: {e}");
    e
}

#[test]
fn bad_inputs_give_one_line_errors() {
    let e = load("no-such-topology").unwrap_err().to_string();
    assert!(e.contains("unknown topology 'no-such-topology'"), "{e}");
    assert!(e.contains("dgx1") && e.contains("dgx-a100"), "{e}");
    assert!(!e.contains('\n'));
    let e = load("dgx1:4").unwrap_err().to_string();
    assert!(e.contains("takes no size"), "{e}");
    let e = load("amd4x2").unwrap_err().to_string();
    assert!(e.contains("no NIC facts"), "{e}");

    let tmp = scratch("errors");
    let dir = tmp.path();
    let e = error_of(dir, "malformed.toml", "ranks = 4\nbandwidth = \n");
    assert!(
        e.contains("malformed.toml:2:") && e.contains("bandwidth"),
        "{e}"
    );

    let e = error_of(dir, "wrongtype.toml", "ranks = 4\nalpha = \"fast\"\n");
    assert!(e.contains("wrongtype.toml:2: alpha:"), "{e}");

    let e = error_of(
        dir,
        "range.toml",
        "ranks = 4\n\n[[link]]\nsrc = 0\ndst = 9\n",
    );
    assert!(
        e.contains("range.toml:5: link[0].dst: rank 9 out of range"),
        "{e}"
    );

    let e = error_of(dir, "self.toml", "ranks = 4\n[[link]]\nsrc = 2\ndst = 2\n");
    assert!(
        e.contains("self.toml:4: link[0].dst: self link 2 -> 2"),
        "{e}"
    );

    let e = error_of(
        dir,
        "zero.toml",
        "ranks = 4\n[[link]]\nsrc = 0\ndst = 1\nbandwidth = 0\n",
    );
    assert!(
        e.contains("zero.toml:5: link[0].bandwidth: bandwidth 0 GB/s is not between"),
        "{e}"
    );

    let e = error_of(dir, "negdefault.toml", "ranks = 2\nbandwidth = -3\n");
    assert!(
        e.contains("negdefault.toml:2: bandwidth: bandwidth -3 GB/s is not between"),
        "{e}"
    );

    let e = error_of(
        dir,
        "dup.toml",
        "ranks = 4\n[[link]]\nsrc = 0\ndst = 1\n[[link]]\nsrc = 1\ndst = 0\n",
    );
    assert!(
        e.contains("dup.toml:6: link[1]: duplicate link 1 -> 0"),
        "{e}"
    );
    assert!(e.contains("already defined by link[0]"), "{e}");

    let e = error_of(
        dir,
        "dupmatrix.toml",
        "matrix = [[0, 1], [1, 0]]\n[[link]]\nsrc = 0\ndst = 1\n",
    );
    assert!(
        e.contains("dupmatrix.toml:3:") && e.contains("matrix[0]"),
        "{e}"
    );

    let e = error_of(dir, "unknown.toml", "ranks = 4\ncolour = \"red\"\n");
    assert!(e.contains("unknown.toml:2: colour: unknown field"), "{e}");

    let e = error_of(
        dir,
        "unknownlink.toml",
        "ranks = 4\n[[link]]\nsrc = 0\ndst = 1\nweight = 3\n",
    );
    assert!(
        e.contains("unknownlink.toml:5: weight: unknown field"),
        "{e}"
    );

    let e = error_of(dir, "rows.toml", "matrix = [\n  [0, 1],\n  [1, 0, 0],\n]\n");
    assert!(e.contains("rows.toml:3: matrix[1]: has 3 entries"), "{e}");

    let e = error_of(dir, "noranks.toml", "bandwidth = 3\n");
    assert!(e.contains("ranks") && e.contains("missing"), "{e}");

    // A quoted value with a line break (found by the fuzz target) stays on one line.
    let e = error_of(dir, "gen-nl.toml", "generator = \"l\\ne\"\n");
    assert!(e.contains("unknown generator 'l\\ne'"), "{e}");
    let e = error_of(dir, "gen.toml", "generator = \"dragonfly\"\n");
    assert!(
        e.contains("gen.toml:1: generator: unknown generator 'dragonfly'"),
        "{e}"
    );

    let e = error_of(
        dir,
        "net.toml",
        "[multinode]\nnode = \"dgx-a100\"\nnodes = 2\nnetwork = \"mesh\"\n",
    );
    assert!(
        e.contains("net.toml:4: multinode.network: unknown network 'mesh'"),
        "{e}"
    );

    let e = error_of(
        dir,
        "node.toml",
        "[multinode]\nnode = \"missing.toml\"\nnodes = 2\n",
    );
    assert!(
        e.contains("node.toml:2: multinode.node:") && e.contains("missing.toml"),
        "{e}"
    );

    let e = error_of(
        dir,
        "switch.toml",
        "ranks = 3\n[[link]]\nsrc = 0\ndst = 1\n[[switch]]\nsrcs = [2]\ndsts = [0]\nbandwidth = 1\n",
    );
    assert!(e.contains("switch[0]: covers no link"), "{e}");

    let e = load(&dir.join("absent.toml").display().to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains("absent.toml: no such file"), "{e}");
}

// Robustness issue 31, items 12 and 13.

/// Absurd bandwidths and latencies are refused with the documented range, naming the field.
#[test]
fn absurd_bandwidths_and_alphas_are_refused() {
    let tmp = scratch("absurd");
    let dir = tmp.path();
    let cases = [
        (
            "tiny.toml",
            "generator = \"ring\"\nsize = 4\nbandwidth = 1e-300\n",
            "tiny.toml:3: bandwidth: bandwidth 1e-300 GB/s is not between 0.001 and 1000000",
        ),
        (
            "huge.toml",
            "ranks = 2\n[[link]]\nsrc = 0\ndst = 1\nbandwidth = 1e300\n",
            "huge.toml:5: link[0].bandwidth: bandwidth 1e300 GB/s",
        ),
        (
            "slow.toml",
            "ranks = 2\nalpha = 1e300\n",
            "slow.toml:2: alpha: alpha 1e300 µs is not between 0 and 1000000",
        ),
        (
            "nan.toml",
            "ranks = 2\nalpha = nan\n",
            "nan.toml:2: alpha: alpha NaN",
        ),
        (
            "nic.toml",
            "ranks = 2\n[nic]\nbandwidth = 1e-9\nper_gpu = 1\n",
            "nic.toml:3: nic.bandwidth:",
        ),
        (
            "wide.toml",
            "bandwidth = 1e5\nmatrix = [[0, 20], [20, 0]]\n",
            "wide.toml:2: matrix[0]: bandwidth 2000000 GB/s",
        ),
    ];
    for (name, text, needle) in cases {
        let e = error_of(dir, name, text);
        assert!(e.contains(needle), "{e}");
        assert!(e.contains("not between"), "{e}");
    }
    // The range's ends are accepted.
    let path = write(
        dir,
        "ends.toml",
        "ranks = 2\nbandwidth = 0.001\nalpha = 1e6\n[[link]]\nsrc = 0\ndst = 1\nbandwidth = 1e6\n",
    );
    load(&path).unwrap();
}

/// Two `[[switch]]` constraints of one name are refused, naming the name.
#[test]
fn duplicate_switch_names_are_refused() {
    let tmp = scratch("dupsw");
    let dir = tmp.path();
    let sw = "[[switch]]\nname = \"pcie\"\nsrcs = [0]\ndsts = [1]\nbandwidth = 1\n";
    let text = format!("generator = \"ring\"\nsize = 4\n{sw}{sw}");
    let e = error_of(dir, "dupsw.toml", &text);
    assert!(
        e.contains(
            "dupsw.toml:8: switch[1].name: a switch constraint named 'pcie' is already defined"
        ),
        "{e}"
    );
    // A name an NVSwitch port already has.
    let text = "ranks = 2\nnvswitch = { bandwidth = 100 }\n[[switch]]\nname = \"nvswitch-out-0\"\nsrcs = [0]\ndsts = [1]\nbandwidth = 1\n";
    let e = error_of(dir, "dupnv.toml", text);
    assert!(e.contains("'nvswitch-out-0' is already defined"), "{e}");
}

#[test]
fn fabrics_with_every_link_both_ways_equal_their_reversal() {
    for spec in [
        "ring:5",
        "torus-2d:4x8",
        "hypercube:16",
        "random:12:3",
        "dgx1",
        "dgx-a100x2",
    ] {
        let t = load(spec).unwrap();
        assert!(t.equals_its_reversal(), "{spec}");
        assert!(t.reversed().equals_its_reversal(), "{spec}");
        // One link faster one way than the other: no longer.
        let mut faster = t.clone();
        faster.links[0].bandwidth *= 2.0;
        assert!(!faster.equals_its_reversal(), "{spec}");
    }
    // A switch constraint over fewer senders than receivers (dgx-a100x2: a NIC's).
    let mut t = load("dgx-a100x2").unwrap();
    let nic = t.switches.iter().position(|s| s.srcs.len() > 1).unwrap();
    t.switches[nic].srcs.pop();
    assert!(!t.equals_its_reversal());
}
