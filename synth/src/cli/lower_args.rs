//! Lowering options shared by the commands that write MSCCL XML, and the writer that lowers,
//! verifies and writes an algorithm in both buffer modes.

use crate::algorithm::Algorithm;
use crate::collective::Kind;
use crate::lower::{lower_verified_noting, LowerOptions, Verified};
use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use clap::Args;
use runtime::ir::{Flavor, Program, Protocol};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The flavour to write a collective in: `given` (`--flavor`), else `fabric`'s runtime, else
/// nccl; a `custom` collective defaults to legacy, and naming another flavour for it is an
/// error (msccl-executor-nccl and RCCL do not load `coll="custom"`).
pub fn resolve_flavor(given: Option<&str>, fabric: Option<Flavor>, custom: bool) -> Result<Flavor> {
    let given = given
        .map(|g| Flavor::from_name(g).with_context(|| format!("--flavor {g}: unknown flavour")));
    let given = given.transpose()?;
    if custom {
        return match given {
            None | Some(Flavor::Legacy) => Ok(Flavor::Legacy),
            Some(f) => bail!(
                "--flavor {}: that runtime does not load custom collectives (coll=\"custom\"); only the legacy runtime (microsoft/msccl) does: use --flavor legacy",
                f.name()
            ),
        };
    }
    Ok(given.or(fabric).unwrap_or(Flavor::Nccl))
}

/// How algorithms are lowered to MSCCL XML.
#[derive(Debug, Args, Clone)]
pub struct LowerArgs {
    /// XML dialect: nccl (msccl-executor-nccl: fused instructions, `reducescatter`), rccl
    /// (only s/r/cpy/re/nop, ≤ 64 threadblocks) or legacy (microsoft/msccl: `reduce_scatter`,
    /// explicit maxBytes). Default: the fabric's runtime (`runtime` in its TOML; rccl on the
    /// AMD built-ins), else nccl.
    #[arg(long, value_parser = ["nccl", "rccl", "legacy"])]
    pub flavor: Option<String>,
    /// Replicate the algorithm over N channels (at most 32), each with 1/N of every chunk.
    #[arg(long, default_value_t = 1, value_parser = super::limits::instances)]
    pub instances: usize,
    /// NCCL protocol written in the XML: Simple, LL or LL128.
    #[arg(long, default_value = "Simple", value_parser = ["Simple", "LL", "LL128"])]
    pub proto: String,
    /// Smallest message size (bytes) the runtime selects the algorithm for.
    #[arg(long, default_value_t = 0)]
    pub min_bytes: u64,
    /// Largest message size (bytes, inclusive; 0 = no limit).
    #[arg(long, default_value_t = 0)]
    pub max_bytes: u64,
}

impl LowerArgs {
    /// The flavour chosen (nccl unless given or set by [`LowerArgs::for_problem`]).
    pub fn flavor(&self) -> Flavor {
        self.flavor
            .as_deref()
            .and_then(Flavor::from_name)
            .unwrap_or(Flavor::Nccl)
    }

    /// These options for a `kind` collective on `topology`: without `--flavor`, the flavour
    /// of the fabric's runtime, or for a custom collective legacy, the only runtime that
    /// loads `coll="custom"`; an error where `--flavor` names a runtime that cannot load it
    /// (checked before any search).
    pub fn for_problem(
        &self,
        topology: &crate::topology::Topology,
        kind: Kind,
    ) -> Result<LowerArgs> {
        let mut args = self.clone();
        let flavor = resolve_flavor(
            args.flavor.as_deref(),
            topology.runtime,
            kind == Kind::Custom,
        )?;
        args.flavor = Some(flavor.name().to_string());
        Ok(args)
    }

    /// Errors for options that cannot be used together (checked before any search).
    pub fn check(&self) -> Result<()> {
        if self.instances == 0 {
            bail!("--instances must be at least 1");
        }
        if self.max_bytes != 0 && self.max_bytes < self.min_bytes {
            bail!(
                "--max-bytes ({}) is below --min-bytes ({})",
                self.max_bytes,
                self.min_bytes
            );
        }
        Ok(())
    }

    /// Lowering options for one buffer mode.
    pub fn options(&self, inplace: bool) -> Result<LowerOptions> {
        self.check()?;
        Ok(LowerOptions {
            flavor: self.flavor(),
            inplace,
            instances: self.instances,
            protocol: Protocol::from_name(&self.proto).context("unknown --proto")?,
            min_bytes: self.min_bytes,
            max_bytes: self.max_bytes,
            ..LowerOptions::default()
        })
    }
}

/// An error when `--out DIR` cannot be a folder: it, or a folder above it, is a file.
pub fn check_out(dir: &Path) -> Result<()> {
    for p in dir.ancestors().filter(|p| !p.as_os_str().is_empty()) {
        if p.exists() && !p.is_dir() {
            if p == dir {
                bail!("--out {}: is a file, not a folder", dir.display());
            }
            bail!(
                "--out {}: {} is a file, not a folder",
                dir.display(),
                p.display()
            );
        }
    }
    Ok(())
}

/// Lowers `algorithm` out of place and in place, verifies both programs and writes
/// `DIR/NAME.xml` and `DIR/NAME.inplace.xml`; returns the paths and what `use_program` made of
/// the out-of-place program (with whether the lowering's fit pass made it). Nothing is
/// written unless both programs can be expressed. The two programs are lowered, verified
/// and streamed to temporary files in parallel (one core each: lowering and verifying are
/// sequential passes), the in-place one is dropped, and the out-of-place one is handed to
/// `use_program` (the main command simulates it, in
/// parallel over sizes); the files get their names once both exist. At most two programs
/// are held at a time (a 1024-rank program takes hundreds of megabytes).
pub fn write_xml<T: Send>(
    algorithm: &Algorithm,
    dir: &Path,
    args: &LowerArgs,
    progress: &Progress,
    use_program: impl FnOnce(&Verified) -> Result<T> + Send,
) -> Result<(Vec<String>, T)> {
    let mut written: Vec<(PathBuf, PathBuf)> = Vec::new();
    let result = (|| {
        let (outofplace, inplace) = rayon::join(
            || lower_and_write(algorithm, dir, args, progress, false),
            || lower_and_write(algorithm, dir, args, progress, true).map(|w| (w.partial, w.path)),
        );
        // Whatever was written is removed again if the other mode fails.
        let files = outofplace
            .as_ref()
            .ok()
            .map(|w| (w.partial.clone(), w.path.clone()));
        written.extend(files);
        written.extend(inplace.as_ref().ok().cloned());
        let (outofplace, _) = (outofplace?, inplace?);
        let used = use_program(&outofplace.verified)?;
        drop(outofplace);
        for (partial, path) in &written {
            std::fs::rename(partial, path)
                .with_context(|| format!("{}: cannot write", path.display()))?;
        }
        let paths = written
            .iter()
            .map(|(_, p)| p.display().to_string())
            .collect();
        Ok((paths, used))
    })();
    if result.is_err() {
        for (partial, _) in &written {
            let _ = std::fs::remove_file(partial);
        }
    }
    result
}

/// A program lowered, verified and written to a temporary file.
struct Written {
    verified: Verified,
    /// The temporary file, and the name it gets.
    partial: PathBuf,
    path: PathBuf,
}

/// Lowers `algorithm` in one buffer mode, verifies it and streams its XML to a temporary
/// file beside its final name (removed again if writing fails).
fn lower_and_write(
    algorithm: &Algorithm,
    dir: &Path,
    args: &LowerArgs,
    progress: &Progress,
    inplace: bool,
) -> Result<Written> {
    let mode = if inplace { "in place" } else { "out of place" };
    progress.message(&format!("lowering and verifying {} {mode}", algorithm.name));
    let verified = lower_verified_noting(algorithm, &args.options(inplace)?)?;
    let path = dir.join(format!(
        "{}.xml",
        verified.program.name.replace("-inplace", ".inplace")
    ));
    let partial = path.with_extension("xml.partial");
    progress.message(&format!("writing {}", path.display()));
    if let Err(e) = write_file(&verified.program, args.flavor(), &partial) {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    Ok(Written {
        verified,
        partial,
        path,
    })
}

/// Streams a program's XML to `path`.
fn write_file(program: &Program, flavor: Flavor, path: &Path) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("{}: cannot write", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    runtime::xml::write_to(program, flavor, &mut out)
        .with_context(|| format!("{}: cannot write", path.display()))?;
    out.flush()
        .with_context(|| format!("{}: cannot write", path.display()))
}
