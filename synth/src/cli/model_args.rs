//! `--model FILE` (and `--local-bw`), shared by the commands that simulate: the model
//! parameters ([`crate::simulate::ModelParams`]) from a TOML file, defaults elsewhere.

use crate::simulate::{ModelParams, SimOptions};
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

/// The model arguments.
#[derive(Debug, Clone, Default, Args)]
pub struct ModelArgs {
    /// TOML file of model parameters (any subset of `ModelParams`' fields: FIFO depth,
    /// slices, protocol latencies, NCCL's tuning figures; see the README).
    #[arg(long, value_name = "FILE")]
    pub model: Option<PathBuf>,
    /// Bandwidth of local copies and reductions, GB/s per GPU (the model's
    /// `local_bandwidth`, 1000 by default).
    #[arg(long)]
    pub local_bw: Option<f64>,
}

impl ModelArgs {
    /// The model parameters: the file's, or the defaults, with `--local-bw` over them.
    pub fn params(&self) -> Result<ModelParams> {
        let mut params = match &self.model {
            Some(path) => ModelParams::load(path)?,
            None => ModelParams::default(),
        };
        if let Some(bw) = self.local_bw {
            if !(bw.is_finite() && bw > 0.0) {
                bail!("--local-bw must be positive, got {bw}");
            }
            params.local_bandwidth = bw;
        }
        Ok(params)
    }

    /// Simulator options with these parameters.
    pub fn sim_options(&self) -> Result<SimOptions> {
        Ok(SimOptions {
            model: self.params()?,
            ..SimOptions::default()
        })
    }
}
