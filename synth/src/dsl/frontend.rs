//! Runs an MSCCLang Python script with synth's pure-Python `msccl` package and returns its
//! trace. The package is embedded in the binary and written to a private temporary folder
//! that goes first on `PYTHONPATH`, so `synth compile prog.py` works from any directory.

use super::trace::{self, TraceProgram};
use anyhow::{bail, Context, Result};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The package files, relative to the `python/` folder of the repository.
const PACKAGE: [(&str, &str); 8] = [
    (
        "msccl/__init__.py",
        include_str!("../../../python/msccl/__init__.py"),
    ),
    (
        "msccl/_run.py",
        include_str!("../../../python/msccl/_run.py"),
    ),
    (
        "msccl/language/__init__.py",
        include_str!("../../../python/msccl/language/__init__.py"),
    ),
    (
        "msccl/language/collectives.py",
        include_str!("../../../python/msccl/language/collectives.py"),
    ),
    (
        "msccl/topologies/__init__.py",
        include_str!("../../../python/msccl/topologies/__init__.py"),
    ),
    (
        "msccl/topologies/distributed.py",
        include_str!("../../../python/msccl/topologies/distributed.py"),
    ),
    (
        "msccl/topologies/nvidia.py",
        include_str!("../../../python/msccl/topologies/nvidia.py"),
    ),
    (
        "msccl/collectives.py",
        include_str!("../../../python/msccl/collectives.py"),
    ),
];

/// A temporary folder removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir() -> Result<TempDir> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "synth-msccl-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    Ok(TempDir(dir))
}

/// Writes the package under `dir`.
pub fn install_package(dir: &Path) -> Result<()> {
    for (rel, text) in PACKAGE {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text).with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(())
}

/// Default wall-clock limit of a program run by `synth compile`, in seconds.
pub const DEFAULT_TIME_LIMIT: f64 = 60.0;

/// How often a running program is checked for exit.
const POLL: Duration = Duration::from_millis(10);

/// The runs in progress (their process group and private folder), for the signal handler.
static RUNNING: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

/// Set by the signal handler before it kills the programs: a program that ends then was
/// killed by it, and the handler, not the caller, decides the exit (130).
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Kills `pgid`'s whole process group (the program and whatever it forked).
fn kill_group(pgid: u32) {
    // SAFETY: killpg has no memory effects; a group that is gone gives ESRCH, ignored.
    unsafe {
        libc::killpg(pgid as libc::pid_t, libc::SIGKILL);
    }
}

/// On SIGINT, SIGTERM or SIGHUP while programs run: kills their process groups, removes
/// their folders and exits 130, as an interrupted command does. Installed once.
fn install_signal_cleanup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
            let running = RUNNING.lock().map(|r| r.clone()).unwrap_or_default();
            for (pgid, dir) in running {
                kill_group(pgid);
                let _ = std::fs::remove_dir_all(dir);
            }
            std::process::exit(130);
        });
    });
}

/// Removes the folders of earlier runs whose synth process is gone (killed with SIGKILL,
/// which no handler sees).
fn remove_stale_folders() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("synth-msccl-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) == 0 }
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Runs `python3 script args...` under the recorder for at most `time_limit` seconds;
/// returns the traced programs. The program runs in a process group of its own, which is
/// killed when it exits (processes it forked do not outlive it), when the limit passes
/// ([`ScriptTimedOut`]) and when synth is interrupted; its folder is removed in every case.
/// A failing script gives one line: its own `file:line: error` when Python raised an
/// exception.
pub fn run_script(script: &str, args: &[String], time_limit: f64) -> Result<Vec<TraceProgram>> {
    if !Path::new(script).is_file() {
        bail!("{script}: no such file");
    }
    if !(time_limit.is_finite() && time_limit > 0.0) {
        bail!("--time-limit must be a positive number of seconds, got {time_limit}");
    }
    remove_stale_folders();
    install_signal_cleanup();
    let dir = temp_dir()?;
    install_package(&dir.0)?;
    let trace_path = dir.0.join("trace.json");
    let mut path = dir.0.display().to_string();
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        path = format!("{path}:{}", old.to_string_lossy());
    }
    // Output goes to files, not pipes: a process the program forks and leaves running
    // would hold a pipe open, and reading it to the end would wait for that process.
    let stderr_path = dir.0.join("stderr.txt");
    let stderr_file = std::fs::File::create(&stderr_path)
        .with_context(|| format!("{}: cannot create", stderr_path.display()))?;
    let mut child = {
        // The lock is held from spawn to registration, so the handler never misses a group.
        let mut running = RUNNING
            .lock()
            .map_err(|_| anyhow::anyhow!("a program run panicked"))?;
        let child = Command::new("python3")
            .arg("-m")
            .arg("msccl._run")
            .arg(script)
            .args(args)
            .env("PYTHONPATH", path)
            .env("SYNTH_MSCCL_TRACE", &trace_path)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr_file)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                anyhow::anyhow!("cannot run python3 ({e}); run scripts/setup to install it")
            })?;
        running.push((child.id(), dir.0.clone()));
        child
    };
    let pgid = child.id();
    let deadline = Instant::now() + Duration::from_secs_f64(time_limit.min(1e9));
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => {
                kill_group(pgid);
                let _ = child.wait();
                unregister(pgid);
                bail!("{script}: cannot wait for python3: {e}");
            }
        }
    };
    // Interrupted: the handler is cleaning up and exits 130; reporting the killed program
    // as a failure here would race it to the exit code.
    while INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(POLL);
    }
    kill_group(pgid);
    let _ = child.wait();
    unregister(pgid);
    let Some(status) = status else {
        return Err(ScriptTimedOut {
            script: script.to_string(),
            seconds: time_limit,
        }
        .into());
    };
    if !status.success() {
        let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("the script failed without a message")
            .trim();
        if last.starts_with(script) || last.contains(".py:") {
            bail!("{last}");
        }
        bail!("{script}: {last}");
    }
    let programs = trace::read(&trace_path.display().to_string())?;
    if programs.is_empty() {
        bail!("{script}: the script defines no `with MSCCLProgram(...)` block");
    }
    Ok(programs)
}

/// Forgets the run of process group `pgid`.
fn unregister(pgid: u32) {
    if let Ok(mut running) = RUNNING.lock() {
        running.retain(|(g, _)| *g != pgid);
    }
}

/// A program ran past `synth compile --time-limit` and was killed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{script}: the program ran past the time limit of {seconds} s and was stopped (raise it with --time-limit)")]
pub struct ScriptTimedOut {
    /// The program.
    pub script: String,
    /// The limit, in seconds.
    pub seconds: f64,
}
