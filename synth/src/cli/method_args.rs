//! Encoding options shared by the commands that synthesize: which encoding, a sketch, and
//! SCCL's extra-memory limit.

use crate::sketch::Sketch;
use crate::synthesize::Method;
use anyhow::{bail, Result};
use clap::Args;

/// Which encoding solves a request, and the sketch that guides the MILP.
#[derive(Debug, Args, Clone)]
pub struct MethodArgs {
    /// Engine: `smt` (exact, integer capacities), `milp` (per-link alpha/beta costs,
    /// sketches), `trees` (throughput-optimal tree packing at any scale), `greedy` (greedy
    /// link-chunk matching over the time-expanded fabric, every collective at any scale) or
    /// `auto` (milp with a sketch; else smt for one node of at most 8 ranks, with tree
    /// packing beside it for allgather, reduce-scatter, allreduce, broadcast and reduce; else tree
    /// packing plus the greedy engine up to 256 ranks, tree packing alone past that, for
    /// allgather, reduce-scatter, allreduce, broadcast and reduce; the greedy engine for
    /// the other collectives; milp where capacities are not integral).
    #[arg(long, default_value = "auto", value_parser = ["smt", "milp", "trees", "greedy", "auto"])]
    pub method: String,
    /// Seed of `--method greedy`'s randomized restarts: the same seed gives the same
    /// algorithm, whatever the machine's load.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// TACCL-style communication sketch (TOML, see `sketches/`) restricting the MILP encoding.
    #[arg(long)]
    pub sketch: Option<String>,
    /// SCCL's `--extra-memory M`: every rank may hold at most its postcondition's chunk
    /// count plus M chunks it did not start with (counted in pieces of the instance; default:
    /// no limit). Non-combining collectives with `--method smt` or `milp` (the catalog
    /// applies it to its non-combining collectives and skips tree packing).
    #[arg(long, value_parser = super::limits::extra_memory)]
    pub extra_memory: Option<usize>,
}

impl MethodArgs {
    /// The method and the loaded sketch; a sketch with `--method smt` is an error.
    pub fn resolve(&self) -> Result<(Method, Option<Sketch>)> {
        let method = match self.method.as_str() {
            "smt" => Method::Smt,
            "milp" => Method::Milp,
            "trees" => Method::Trees,
            "greedy" => Method::Greedy { seed: self.seed },
            _ => Method::Auto,
        };
        if matches!(method, Method::Smt | Method::Trees | Method::Greedy { .. })
            && self.sketch.is_some()
        {
            bail!("--sketch applies to the MILP encoding; use --method milp or auto");
        }
        let sketch = self.sketch.as_deref().map(Sketch::load).transpose()?;
        Ok((method, sketch))
    }
}
