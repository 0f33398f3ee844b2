//! Lowering options shared by the commands that write MSCCL XML, and the writer that lowers,
//! verifies and writes an algorithm in both buffer modes.

use crate::algorithm::Algorithm;
use crate::lower::{lower_to_xml, LowerOptions};
use anyhow::{bail, Context, Result};
use clap::Args;
use runtime::ir::{Flavor, Protocol};
use std::path::Path;

/// How algorithms are lowered to MSCCL XML.
#[derive(Debug, Args, Clone)]
pub struct LowerArgs {
    /// XML dialect: nccl (msccl-executor-nccl: fused instructions, `reducescatter`), rccl
    /// (only s/r/cpy/re/nop, ≤ 64 threadblocks) or legacy (microsoft/msccl: `reduce_scatter`,
    /// explicit maxBytes).
    #[arg(long, default_value = "nccl", value_parser = ["nccl", "rccl", "legacy"])]
    pub flavor: String,
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
    /// The flavour chosen.
    pub fn flavor(&self) -> Flavor {
        match self.flavor.as_str() {
            "rccl" => Flavor::Rccl,
            "legacy" => Flavor::Legacy,
            _ => Flavor::Nccl,
        }
    }

    /// Lowering options for one buffer mode.
    pub fn options(&self, inplace: bool) -> Result<LowerOptions> {
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

/// Lowers `algorithm` out of place and in place, verifies both programs and writes
/// `DIR/NAME.xml` and `DIR/NAME.inplace.xml`; returns the paths and the out-of-place
/// program. Nothing is written unless both programs can be expressed.
pub fn write_xml(
    algorithm: &Algorithm,
    dir: &Path,
    args: &LowerArgs,
) -> Result<(Vec<String>, runtime::ir::Program)> {
    let mut files = Vec::new();
    let mut programs = Vec::new();
    for inplace in [false, true] {
        let (program, xml) = lower_to_xml(algorithm, &args.options(inplace)?)?;
        let path = dir.join(format!(
            "{}.xml",
            program.name.replace("-inplace", ".inplace")
        ));
        files.push((path, xml));
        programs.push(program);
    }
    let mut paths = Vec::new();
    for (path, xml) in files {
        std::fs::write(&path, xml).with_context(|| format!("{}: cannot write", path.display()))?;
        paths.push(path.display().to_string());
    }
    Ok((paths, programs.swap_remove(0)))
}
