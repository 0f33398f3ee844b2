//! `synth catalog --deploy`: per flavour, every file written verifies (`synth verify`) and
//! passes the lint, `env.sh` holds the runtime's settings, `deploy.json` the sizes NCCL
//! serves; the README recipe names every setting the lint checks.

use std::path::Path;
use std::process::{Command, Output};

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .env_remove("NCCL_MAX_NCHANNELS")
        .env_remove("NCCL_ALGO")
        .env_remove("NCCL_MSCCL_ENABLE")
        .output()
        .expect("synth runs")
}

/// A fresh scratch folder for one test, removed when the returned guard drops (also when
/// the test fails).
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("synth-deploy-{name}-"))
        .tempdir()
        .unwrap()
}

#[test]
fn every_deployed_file_verifies_and_passes_the_lint() {
    for (flavor, needed) in [
        (
            "nccl",
            vec![
                "NCCL_MSCCL_ENABLE=1",
                "MSCCL_ALGO_DIR=",
                "NCCL_MAX_NCHANNELS",
            ],
        ),
        (
            "rccl",
            vec![
                "RCCL_MSCCL_ENABLE=1",
                "RCCL_MSCCL_FORCE_ENABLE=1",
                "MSCCL_ALGO_DIR=",
            ],
        ),
        ("legacy", vec!["NCCL_ALGO=MSCCL,RING,TREE"]),
    ] {
        let tmp = temp_dir(flavor);
        let dir = tmp.path();
        let (cat, dep) = (dir.join("catalog"), dir.join("deploy"));
        let out = synth(&[
            "catalog",
            "--topo",
            "fully-connected:4",
            "--colls",
            "allgather,allreduce",
            "--time-limit",
            "10",
            "--sizes",
            "1K:64M:16",
            "--flavor",
            flavor,
            "--out",
            cat.to_str().unwrap(),
            "--deploy",
            dep.to_str().unwrap(),
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{flavor}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let d = &v["deploy"];
        assert_eq!(d["findings"].as_array().unwrap().len(), 0, "{flavor}: {d}");
        let files = d["files"].as_array().unwrap();
        assert!(!files.is_empty());
        for f in files {
            let path = dep.join(f.as_str().unwrap());
            let out = synth(&["verify", path.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{flavor} {path:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Only XML files in the runtime's folder.
        for e in std::fs::read_dir(dep.join("algos")).unwrap() {
            assert!(e.unwrap().file_name().to_string_lossy().ends_with(".xml"));
        }
        let env = std::fs::read_to_string(dep.join("env.sh")).unwrap();
        for n in needed {
            assert!(env.contains(n), "{flavor}: `{n}` not in {env}");
        }
        // The legacy runtime takes up to 4 files by name, more through a config file (a
        // range per protocol can make more than 4).
        if flavor == "legacy" {
            assert!(
                env.contains("MSCCL_XML_FILES=") || env.contains("MSCCL_CONFIG="),
                "{env}"
            );
        }
        let fallbacks = d["falls_back_to_nccl"].as_array().unwrap();
        assert_eq!(fallbacks.len(), 4, "{flavor}: {d}");
    }
}

#[test]
fn environment_that_turns_msccl_off_fails_the_lint() {
    let tmp = temp_dir("env");
    let dir = tmp.path();
    let out = Command::new(env!("CARGO_BIN_EXE_synth"))
        .args([
            "catalog",
            "--topo",
            "fully-connected:4",
            "--colls",
            "allgather",
            "--time-limit",
            "10",
            "--sizes",
            "1K:1M:16",
            "--flavor",
            "nccl",
            "--out",
        ])
        .arg(dir.join("catalog"))
        .arg("--deploy")
        .arg(dir.join("deploy"))
        .env("NCCL_MSCCL_ENABLE", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.trim_end()
            .lines()
            .last()
            .unwrap()
            .contains("NCCL_MSCCL_ENABLE=0"),
        "{err}"
    );
    // The files and env.sh are still written, with the finding.
    let env = std::fs::read_to_string(dir.join("deploy/env.sh")).unwrap();
    assert!(
        env.contains("# LINT environment: NCCL_MSCCL_ENABLE=0"),
        "{env}"
    );
    // A used deploy folder is refused.
    let again = synth(&[
        "catalog",
        "--topo",
        "fully-connected:4",
        "--colls",
        "allgather",
        "--time-limit",
        "10",
        "--sizes",
        "1K:1M:16",
        "--out",
        dir.join("c2").to_str().unwrap(),
        "--deploy",
        dir.join("deploy").to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
}

#[test]
fn readme_recipe_names_every_linted_setting() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let recipe = readme
        .split("### Deploying a catalog")
        .nth(1)
        .expect("README has a deploy recipe")
        .split("\n## ")
        .next()
        .unwrap();
    for var in [
        "NCCL_MSCCL_ENABLE",
        "MSCCL_ALGO_DIR",
        "NCCL_MAX_NCHANNELS",
        "RCCL_MSCCL_ENABLE",
        "RCCL_MSCCL_FORCE_ENABLE",
        "NCCL_ALGO",
        "MSCCL_XML_FILES",
        "MSCCL_CONFIG",
        "torchrun",
        "minBytes",
        "maxBytes",
        "threadblocks",
    ] {
        assert!(
            recipe.contains(var),
            "README deploy recipe does not name {var}"
        );
    }
}
