//! Where a DSL operation was written, and the one-line error that names it.

use std::fmt;
use std::sync::Arc;

/// A place in a program's source: the file as the front end saw it, and a 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Loc {
    /// Source file (a Python script, or a Rust file for the builder API).
    pub file: Arc<str>,
    /// 1-based line number (0 when unknown).
    pub line: u32,
}

impl Loc {
    /// A location in `file` at `line`.
    pub fn new(file: &str, line: u32) -> Loc {
        Loc {
            file: Arc::from(file),
            line,
        }
    }

    /// The Rust caller of a `#[track_caller]` builder method.
    #[track_caller]
    pub fn caller() -> Loc {
        let at = std::panic::Location::caller();
        Loc::new(at.file(), at.line())
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A mistake in a DSL program: one line, `file:line: reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{loc}: {message}")]
pub struct DslError {
    /// Where the offending operation was written.
    pub loc: Loc,
    /// What is wrong (one line).
    pub message: String,
    /// Further lines shown only on request (`--verbose`, `--json`): every blocked
    /// threadblock of a deadlock.
    pub detail: Vec<String>,
}

impl DslError {
    /// An error at `loc`; newlines in `message` are folded so the error stays one line.
    pub fn new(loc: &Loc, message: impl Into<String>) -> DslError {
        let message: String = message.into();
        DslError {
            loc: loc.clone(),
            message: message.split_whitespace().collect::<Vec<_>>().join(" "),
            detail: Vec::new(),
        }
    }

    /// The error with `detail` lines.
    pub fn with_detail(mut self, detail: Vec<String>) -> DslError {
        self.detail = detail;
        self
    }
}

/// Shorthand for results of the DSL.
pub type DslResult<T> = Result<T, DslError>;
