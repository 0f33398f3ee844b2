//! The `synth` binary: output formats, files, and one-line errors with a non-zero exit.

use std::process::{Command, Output};

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .output()
        .expect("synth runs")
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("synth-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Asserts a failure with exit code 1, no panic, and exactly one stderr line containing `needle`.
fn fails_with(args: &[&str], needle: &str) {
    let out = synth(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {stderr}"
    );
    assert!(
        stderr.contains(needle),
        "{args:?}: `{needle}` not in: {stderr}"
    );
}

#[test]
fn main_command_prints_table_and_writes_json() {
    let dir = temp_dir("table");
    let out = synth(&[
        "--topo",
        "dgx1",
        "--coll",
        "allgather",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("lower bounds: 2 steps, 7/6 rounds per chunk"),
        "{stdout}"
    );
    assert!(stdout.contains("3/2") && stdout.contains("7/6"), "{stdout}");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "json"))
            .count()
            >= 2,
        "{files:?}"
    );
}

#[test]
fn json_output_follows_the_convention() {
    let dir = temp_dir("json");
    let out = synth(&[
        "--topo",
        "dgx1",
        "--coll",
        "allgather",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["topology"], "dgx1");
    assert_eq!(doc["collective"], "allgather");
    assert_eq!(doc["bounds"]["steps"], 2);
    assert_eq!(doc["bounds"]["rounds_per_chunk"], "7/6");
    assert_eq!(doc["complete"], true);
    assert!(doc["seconds"].as_f64().is_some());
    let algorithms = doc["algorithms"].as_array().unwrap();
    assert_eq!(algorithms.len(), 2);
    assert_eq!(
        (
            algorithms[0]["steps"].as_u64(),
            algorithms[0]["rounds"].as_u64(),
            algorithms[0]["chunks"].as_u64()
        ),
        (Some(2), Some(3), Some(2))
    );
    let file = algorithms[1]["file"].as_str().unwrap();
    let algo: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(algo["steps"].as_array().unwrap().len(), 3);
}

#[test]
fn topo_show_reports_dgx_a100_bandwidth() {
    let out = synth(&["topo", "show", "dgx-a100", "--json"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("300"), "{text}");
}

#[test]
fn unknown_topology() {
    fails_with(&["--topo", "dgx9", "--coll", "allgather"], "dgx9");
}

#[test]
fn unknown_collective() {
    fails_with(
        &["--topo", "dgx1", "--coll", "allscatter"],
        "unknown collective `allscatter`",
    );
}

#[test]
fn malformed_toml_names_file_and_line() {
    let dir = temp_dir("badtoml");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "name = \"x\"\nranks = 4\n[[link]]\nsrc = 0\ndst = \n",
    )
    .unwrap();
    fails_with(
        &["--topo", path.to_str().unwrap(), "--coll", "allgather"],
        "bad.toml:5",
    );
}

#[test]
fn root_out_of_range() {
    fails_with(
        &["--topo", "dgx1", "--coll", "broadcast", "--root", "8"],
        "--root 8 is out of range",
    );
}

#[test]
fn disconnected_topology_names_chunk_and_rank() {
    let dir = temp_dir("disconnected");
    let path = dir.join("split.toml");
    std::fs::write(&path, "name = \"split\"\nranks = 4\nbandwidth = 25\n[[link]]\nsrc = 0\ndst = 1\n[[link]]\nsrc = 2\ndst = 3\n").unwrap();
    fails_with(
        &["--topo", path.to_str().unwrap(), "--coll", "allgather"],
        "cannot reach rank",
    );
}

#[test]
fn unsat_instance() {
    fails_with(
        &[
            "--topo",
            "dgx1",
            "--coll",
            "allgather",
            "--steps",
            "1",
            "--rounds",
            "1",
            "--chunks",
            "1",
        ],
        "UNSAT",
    );
}

#[test]
fn time_limit_hit() {
    let dir = temp_dir("timeout");
    fails_with(
        &[
            "--topo",
            "dgx1",
            "--coll",
            "alltoall",
            "--steps",
            "8",
            "--rounds",
            "8",
            "--chunks",
            "3",
            "--time-limit",
            "0.001",
            "--out",
            dir.to_str().unwrap(),
        ],
        "time limit",
    );
}

#[test]
fn bounds_reports_steps_rounds_and_cut_bandwidth() {
    let out = synth(&["bounds", "--topo", "dgx1", "--coll", "allgather", "--json"]);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["bounds"]["steps"], 2);
    assert_eq!(doc["bounds"]["rounds_per_chunk"], "7/6");
    let busbw = doc["busbw_bound_gbps"].as_f64().unwrap();
    assert!(
        (busbw - 150.0).abs() < 0.5,
        "dgx1 allgather cut bound {busbw}"
    );
}
