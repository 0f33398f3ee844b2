//! What `verify`, `run` and `simulate` say about a program file beside its result: for an
//! MSCCL XML file, which runtime flavours would refuse it and why, the attributes it leaves
//! out and their defaults; for any file, whether its postcondition is known.

use runtime::ir::{Flavor, Program};
use runtime::xml::Dialect;

/// Notes on one program file.
#[derive(Debug, Clone, Default)]
pub struct FileNotes {
    /// What each runtime would do with an XML file (`None` for JSON files).
    pub dialect: Option<Dialect>,
    /// False for a custom collective without its conditions (another tool's XML).
    pub postcondition_known: bool,
}

/// The sentence for a program whose result cannot be checked.
pub const UNKNOWN_POSTCONDITION: &str = "coll=\"custom\" without synth's <!-- synth-custom --> conditions: the postcondition is unknown, so the result is not checked (checked: structure, buffer bounds, send/receive matching, deadlock freedom and races)";

impl FileNotes {
    /// The notes of `program`, read with `dialect`.
    pub fn new(program: &Program, dialect: Option<Dialect>) -> FileNotes {
        FileNotes {
            dialect,
            postcondition_known: program.postcondition_known(),
        }
    }

    /// One line each: the runtimes that load the file, each refusing one's first reason,
    /// the defaults used, and the unknown postcondition.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(d) = &self.dialect {
            if !d.refusals.is_empty() {
                let names: Vec<&str> = d.accepting().iter().map(|f| f.name()).collect();
                lines.push(format!("loads on: {}", names.join(", ")));
                lines.extend(d.refusal_lines());
            }
            lines.extend(d.defaulted_line());
        }
        if !self.postcondition_known {
            lines.push(UNKNOWN_POSTCONDITION.to_string());
        }
        lines
    }

    /// Prints [`FileNotes::lines`] on stderr as notes.
    pub fn print_stderr(&self) {
        for line in self.lines() {
            eprintln!("note: {line}");
        }
    }

    /// The JSON form: `runtimes` (per flavour: loads, and the reason when not), `defaulted`
    /// and `postcondition_known`.
    pub fn json(&self) -> serde_json::Value {
        let runtimes = self.dialect.as_ref().map(|d| {
            Flavor::ALL
                .iter()
                .map(|&f| {
                    let r = d.refusal(f);
                    (
                        f.name().to_string(),
                        serde_json::json!({
                            "loads": r.is_none(),
                            "line": r.map(|r| r.line),
                            "reason": r.map(|r| &r.reason),
                            "more_reasons": r.map_or(0, |r| r.more),
                        }),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
        });
        serde_json::json!({
            "runtimes": runtimes,
            "defaulted": self.dialect.as_ref().map(|d| &d.defaulted),
            "postcondition_known": self.postcondition_known,
        })
    }
}
