//! Why the runtimes cannot express a lowered algorithm: the typed failures that the
//! lowering's retries and its callers decide on (an internal error, or a malformed
//! algorithm, is an ordinary `anyhow` error instead).

use runtime::ir::Flavor;
use runtime::xml::{WriteError, WriteProblem};

/// A program the runtimes cannot express, whatever the channel split tried.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// The program needs more channels than the runtimes have.
    #[error(
        "{name} cannot be expressed: it needs {needed} channels (the runtimes allow {allowed})"
    )]
    TooManyChannels {
        /// The algorithm's name.
        name: String,
        /// Channels the program needs.
        needed: usize,
        /// Channels the runtimes allow.
        allowed: usize,
    },
    /// One link carries more transfers than every channel's threadblocks can hold.
    #[error("{name} cannot be expressed: its busiest link carries {busiest} transfers, more than {channels} channels of {steps}-step threadblocks hold")]
    BusiestLinkOverflows {
        /// The algorithm's name.
        name: String,
        /// Transfers on the busiest link.
        busiest: usize,
        /// Channels the runtimes allow.
        channels: usize,
        /// Steps per threadblock.
        steps: usize,
    },
    /// The program breaks a limit of the flavour's format (threadblocks, steps per
    /// threadblock, dependency ids, name, ...): [`LowerError::write_problem`] says which.
    #[error("{name} cannot be expressed for the {flavor:?} runtime")]
    Unwritable {
        /// The algorithm's name.
        name: String,
        /// The flavour lowered for.
        flavor: Flavor,
        /// What the writer refused.
        #[source]
        source: WriteError,
    },
}

impl LowerError {
    /// The writer's reason, where the format refused the program.
    pub fn write_problem(&self) -> Option<&WriteProblem> {
        match self {
            LowerError::Unwritable { source, .. } => Some(&source.problem),
            _ => None,
        }
    }

    /// Whether a rank of the program had more threadblocks than the flavour runs.
    pub fn is_too_many_threadblocks(&self) -> bool {
        matches!(
            self.write_problem(),
            Some(WriteProblem::TooManyThreadblocks { .. })
        )
    }

    /// Whether the program had more steps in a threadblock than the flavour runs (a finer
    /// split of connections over channels may fit).
    pub fn is_too_many_steps(&self) -> bool {
        matches!(
            self.write_problem(),
            Some(WriteProblem::TooManySteps { .. })
        )
    }
}
