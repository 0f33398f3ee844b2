//! `synth verify`, `run` and `simulate` on XML of every runtime's dialect (small files in
//! `tests/data/dialects/`, written for these tests in the shape each tool emits), and the
//! one-line errors with their detail under `--verbose` and in `--json`.

use std::process::{Command, Output};

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .output()
        .expect("synth runs")
}

fn data(name: &str) -> String {
    format!("{}/tests/data/dialects/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn msccl_tools_xml_verifies_runs_and_simulates_naming_the_runtimes_that_refuse_it() {
    let file = data("allgather-msccl-tools.xml");
    let out = synth(&["verify", &file]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains(": OK (AllGather on 2 ranks"), "{stdout}");
    assert!(stdout.contains("  loads on: legacy\n"), "{stdout}");
    assert!(
        stdout.contains(
            "  nccl refuses it: line 1: Attribute outofplace of node algo not found (and 2 more)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("defaulted: algo outofplace=1 (legacy), algo minBytes=0 (legacy), algo maxBytes=134217728"),
        "{stdout}"
    );

    let out = synth(&["verify", &file, "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["runtimes"]["legacy"]["loads"], true);
    assert_eq!(doc["runtimes"]["rccl"]["loads"], false);
    assert_eq!(
        doc["runtimes"]["rccl"]["reason"],
        "Attribute outofplace of node algo not found"
    );
    assert_eq!(doc["defaulted"][0]["attribute"], "algo outofplace");

    let out = synth(&["run", &file, "--size", "64K", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &doc["rows"][0];
    assert_eq!(row["wrong"], 0, "{doc}");

    let out = synth(&[
        "simulate",
        &file,
        "--topo",
        "fully-connected:2",
        "--sizes",
        "1M",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("note: nccl refuses it: line 1: Attribute outofplace"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_custom_collective_without_conditions_says_its_postcondition_is_unknown() {
    let file = data("custom-msccl-tools.xml");
    let out = synth(&["verify", &file]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("the postcondition is unknown, so the result is not checked"),
        "{stdout}"
    );
    let out = synth(&["verify", &file, "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["postcondition_known"], false);
    let out = synth(&["run", &file, "--size", "64K"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("note: coll=\"custom\" without synth's"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_deadlock_is_one_short_line_with_every_blocked_threadblock_on_request() {
    let file = data("ring-deadlock-8.xml");
    let out = synth(&["verify", &file]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let line = stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "{stderr}");
    // The message past the file name fits in 300 characters.
    let message = line.split_once(&file).unwrap().1;
    assert!(message.len() <= 300, "{} chars: {line}", message.len());
    assert!(
        line.contains("deadlock: rank 0 tb 0 step 0 (r) waits to receive from rank 7 on channel 0; 7 more threadblocks blocked"),
        "{line}"
    );

    let out = synth(&["verify", "--verbose", &file]);
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 9, "{stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    assert!(
        lines[8].contains("rank 7 tb 0 step 0 (r) waits to receive from rank 6"),
        "{stderr}"
    );

    let out = synth(&["verify", "--json", &file]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["detail"].as_array().unwrap().len(), 8, "{doc}");
}
