//! Runs an MSCCLang Python script with synth's pure-Python `msccl` package and returns its
//! trace. The package is embedded in the binary and written to a private temporary folder
//! that goes first on `PYTHONPATH`, so `synth compile prog.py` works from any directory.

use super::trace::{self, TraceProgram};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The package files, relative to the `python/` folder of the repository.
const PACKAGE: [(&str, &str); 6] = [
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

/// Runs `python3 script args...` under the recorder; returns the traced programs. A failing
/// script gives one line: its own `file:line: error` when Python raised an exception.
pub fn run_script(script: &str, args: &[String]) -> Result<Vec<TraceProgram>> {
    if !Path::new(script).is_file() {
        bail!("{script}: no such file");
    }
    let dir = temp_dir()?;
    install_package(&dir.0)?;
    let trace_path = dir.0.join("trace.json");
    let mut path = dir.0.display().to_string();
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        path = format!("{path}:{}", old.to_string_lossy());
    }
    let output = Command::new("python3")
        .arg("-m")
        .arg("msccl._run")
        .arg(script)
        .args(args)
        .env("PYTHONPATH", path)
        .env("SYNTH_MSCCL_TRACE", &trace_path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .map_err(|e| {
            anyhow::anyhow!("cannot run python3 ({e}); run scripts/setup to install it")
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
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
