//! `synth compile PROGRAM.py` runs the user's Python: a time limit stops it, what it forks
//! does not outlive it, and its private folder is removed when it ends, times out or synth
//! is interrupted.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A fresh folder for one test (the programs and the TMPDIR that synth's folders go to),
/// removed when the returned guard drops (also when the test fails).
fn scratch(name: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("synth-compile-{name}-"))
        .tempdir()
        .unwrap();
    std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
    dir
}

/// `synth compile` with TMPDIR set to `dir/tmp`.
fn compile(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_synth"));
    cmd.arg("compile").args(args).env("TMPDIR", dir.join("tmp"));
    cmd
}

/// The entries left in `dir/tmp`.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join("tmp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Whether process `pid` still runs (a zombie waiting for its reaper does not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// Whether process `pid` ends within a minute (a killed process may take a moment).
fn ends(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while running(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const VALID: &str = r#"from msccl.language import *
from msccl.topologies import fully_connected
from msccl.language.collectives import AllGather
with MSCCLProgram('p', fully_connected(2), AllGather(2, 1, False), 1):
    for r in range(2):
        chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
        chunk(r, Buffer.input, 0).copy(1 - r, Buffer.output, r)
    XML()
"#;

#[test]
fn a_program_past_the_time_limit_is_stopped_and_cleaned_up() {
    let tmp = scratch("loop");
    let dir = tmp.path();
    let prog = dir.join("spin.py");
    std::fs::write(&prog, "while True:\n    pass\n").unwrap();
    let out = compile(dir, &[prog.to_str().unwrap(), "--time-limit", "1"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains("time limit of 1 s"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(leftovers(dir).is_empty(), "{:?}", leftovers(dir));
    let bad = compile(dir, &[prog.to_str().unwrap(), "--time-limit", "0"])
        .output()
        .unwrap();
    assert!(stderr(&bad).contains("--time-limit"), "{}", stderr(&bad));
}

#[test]
fn what_a_program_forks_does_not_outlive_it() {
    let tmp = scratch("fork");
    let dir = tmp.path();
    let pid_file = dir.join("orphan.pid");
    let prog = dir.join("forks.py");
    let text = format!(
        "import subprocess\n\
         p = subprocess.Popen(['sleep', '300'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n\
         open({:?}, 'w').write(str(p.pid))\n{VALID}",
        pid_file.display().to_string()
    );
    std::fs::write(&prog, text).unwrap();
    let started = Instant::now();
    let out = compile(dir, &[prog.to_str().unwrap(), "--stdout"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("<algo"));
    // Without the fix synth waited for the orphan's 300 s (it held the output pipe).
    assert!(started.elapsed() < Duration::from_secs(200));
    let orphan: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(ends(orphan), "the forked sleep {orphan} still runs");
    assert!(leftovers(dir).is_empty(), "{:?}", leftovers(dir));
}

#[test]
fn an_interrupted_compile_kills_the_program_and_removes_its_folder() {
    let tmp = scratch("signal");
    let dir = tmp.path();
    let pid_file = dir.join("program.pid");
    let prog = dir.join("spin.py");
    let text = format!(
        "import os\nopen({:?}, 'w').write(str(os.getpid()))\nwhile True:\n    pass\n",
        pid_file.display().to_string()
    );
    std::fs::write(&prog, text).unwrap();
    let mut child = compile(dir, &[prog.to_str().unwrap(), "--time-limit", "600"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait (bounded) until the program runs.
    let deadline = Instant::now() + Duration::from_secs(120);
    let program = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the program never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        !leftovers(dir).is_empty(),
        "synth's folder exists while it runs"
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(ends(program), "the program {program} still runs");
    assert!(leftovers(dir).is_empty(), "{:?}", leftovers(dir));
}
