//! Encoding options shared by the commands that synthesize: which encoding, and a sketch.

use crate::sketch::Sketch;
use crate::synthesize::Method;
use anyhow::{bail, Result};
use clap::Args;

/// Which encoding solves a request, and the sketch that guides the MILP.
#[derive(Debug, Args, Clone)]
pub struct MethodArgs {
    /// Encoding: `smt` (exact, integer capacities), `milp` (per-link alpha/beta costs,
    /// sketches, multi-node) or `auto` (smt for one node of at most 8 ranks, milp otherwise).
    #[arg(long, default_value = "auto", value_parser = ["smt", "milp", "auto"])]
    pub method: String,
    /// TACCL-style communication sketch (TOML, see `sketches/`) restricting the MILP encoding.
    #[arg(long)]
    pub sketch: Option<String>,
}

impl MethodArgs {
    /// The method and the loaded sketch; a sketch with `--method smt` is an error.
    pub fn resolve(&self) -> Result<(Method, Option<Sketch>)> {
        let method = match self.method.as_str() {
            "smt" => Method::Smt,
            "milp" => Method::Milp,
            _ => Method::Auto,
        };
        if method == Method::Smt && self.sketch.is_some() {
            bail!("--sketch applies to the MILP encoding; use --method milp or auto");
        }
        let sketch = self.sketch.as_deref().map(Sketch::load).transpose()?;
        Ok((method, sketch))
    }
}
