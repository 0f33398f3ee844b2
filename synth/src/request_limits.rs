//! The largest sizes one synthesis request may ask for (README "Limits"): steps, rounds and
//! chunks of an instance, a search's step cap and extra memory. The command line's value
//! parsers (`cli::limits`) and the sketch file ([`crate::sketch`]) check against them.

use anyhow::{bail, Result};

/// Most steps of one instance (`--steps`).
pub const MAX_STEPS: usize = 256;
/// Most rounds of one instance or search (`--rounds`).
pub const MAX_ROUNDS: usize = 256;
/// Highest step cap of a search (`--max-steps`).
pub const MAX_SEARCH_STEPS: usize = 1024;
/// Largest `--extra-memory` (chunks a rank may hold beyond its postcondition).
pub const MAX_EXTRA_MEMORY: usize = 1 << 20;
/// Most chunks each original chunk is split into (`--chunks`, `--max-chunks`).
pub const MAX_CHUNKS: usize = 64;

/// Checks the steps, rounds and chunks of one instance (`synth catalog --add`) against their
/// limits.
pub fn instance(steps: usize, rounds: usize, chunks: usize) -> Result<()> {
    for (what, v, hi) in [
        ("steps", steps, MAX_STEPS),
        ("rounds", rounds, MAX_ROUNDS),
        ("chunks", chunks, MAX_CHUNKS),
    ] {
        if v == 0 || v > hi {
            bail!("{what} {v} is not between 1 and {hi}");
        }
    }
    Ok(())
}
