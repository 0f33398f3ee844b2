//! Limits on the command line's numeric options (README "Limits"), as clap value parsers: a
//! value outside its limit is rejected in one line before anything is loaded or solved. The
//! sizes of a request (steps, rounds, chunks) are [`crate::request_limits`]'s, shared with
//! the sketch file.

use crate::collective::Kind;
use anyhow::{bail, Result};

pub use crate::request_limits::{
    instance, MAX_CHUNKS, MAX_EXTRA_MEMORY, MAX_ROUNDS, MAX_SEARCH_STEPS, MAX_STEPS,
};

/// Most channels an algorithm is replicated over (`--instances`; the runtimes' MAXCHANNELS).
pub const MAX_INSTANCES: usize = runtime::limits::Limits::PORTABLE.max_channels;
/// Longest time limit in seconds (`--time-limit`): one year.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;
/// Most timed or warm-up iterations (`--iters`, `--warmup`) and bench runs (`--repeat`).
pub const MAX_ITERS: usize = 10_000;

/// Parses an integer in `lo..=hi`.
fn integer(text: &str, lo: usize, hi: usize) -> Result<usize, String> {
    let v: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("expected an integer from {lo} to {hi}"))?;
    if v < lo || v > hi {
        return Err(format!("{v} is not between {lo} and {hi}"));
    }
    Ok(v)
}

/// `--steps`: 1 to [`MAX_STEPS`].
pub fn steps(text: &str) -> Result<usize, String> {
    integer(text, 1, MAX_STEPS)
}

/// `--rounds`: 1 to [`MAX_ROUNDS`].
pub fn rounds(text: &str) -> Result<usize, String> {
    integer(text, 1, MAX_ROUNDS)
}

/// `--max-steps`: 1 to [`MAX_SEARCH_STEPS`].
pub fn max_steps(text: &str) -> Result<usize, String> {
    integer(text, 1, MAX_SEARCH_STEPS)
}

/// `--chunks` and `--max-chunks`: 1 to [`MAX_CHUNKS`].
pub fn chunks(text: &str) -> Result<usize, String> {
    integer(text, 1, MAX_CHUNKS)
}

/// `--extra-memory`: 0 to [`MAX_EXTRA_MEMORY`].
pub fn extra_memory(text: &str) -> Result<usize, String> {
    integer(text, 0, MAX_EXTRA_MEMORY)
}

/// `--instances`: 1 to [`MAX_INSTANCES`].
pub fn instances(text: &str) -> Result<usize, String> {
    integer(text, 1, MAX_INSTANCES)
}

/// `--warmup`: 0 to [`MAX_ITERS`].
pub fn warmup(text: &str) -> Result<usize, String> {
    integer(text, 0, MAX_ITERS)
}

/// `--iters` and `bench --repeat`: 1 to [`MAX_ITERS`] (0 timed runs would time nothing).
pub fn iterations(text: &str) -> Result<usize, String> {
    integer(text, 1, MAX_ITERS)
}

/// `--work-limit`: 1 to [`crate::sketch::MAX_WORK_LIMIT`] branch-and-bound nodes.
pub fn work(text: &str) -> Result<u64, String> {
    integer(text, 1, crate::sketch::MAX_WORK_LIMIT as usize).map(|v| v as u64)
}

/// `--time-limit`: a positive number of seconds up to [`MAX_SECONDS`].
pub fn seconds(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds".to_string())?;
    if !(v > 0.0 && v <= MAX_SECONDS) {
        return Err(format!(
            "must be a positive number of seconds, at most {MAX_SECONDS} (a year)"
        ));
    }
    Ok(v)
}

/// The root of a collective: `--root` only for rooted collectives (`kind` None is a custom
/// collective file, which has none), and only a rank of the topology; 0 when not given.
pub fn root(kind: Option<Kind>, root: Option<usize>, ranks: usize) -> Result<usize> {
    let Some(r) = root else { return Ok(0) };
    match kind {
        Some(k) if k.is_rooted() => {
            if r >= ranks {
                bail!(
                    "--root {r} is out of range: the topology has ranks 0..{}",
                    ranks.saturating_sub(1)
                );
            }
            Ok(r)
        }
        Some(k) => {
            bail!("--root {r}: {k} has no root (only broadcast, reduce, gather and scatter do)")
        }
        None => bail!("--root {r}: a custom collective file has no root"),
    }
}
