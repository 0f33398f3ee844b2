//! Which runtime flavours would load a file the reader accepted, and why the others would
//! refuse it (msccl-ir.md §1.3, §1.11, §2.2, §2.3): the reader accepts what at least one
//! runtime accepts, defaults a missing attribute as that runtime does, and records here
//! what each flavour would do with the file.

use crate::ir::Flavor;
use serde::Serialize;

/// The first reason one flavour would refuse a file, and how many more it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The flavour.
    pub flavor: Flavor,
    /// 1-based line of the first reason.
    pub line: usize,
    /// The first reason, in the runtime's words where it has some.
    pub reason: String,
    /// Further reasons of the same flavour not kept.
    pub more: usize,
}

/// An attribute the file leaves out, and the value the reader gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Defaulted {
    /// Element and attribute, e.g. `algo outofplace`.
    pub attribute: String,
    /// The value used.
    pub value: String,
    /// Whose default it is (the runtime that accepts the file without it).
    pub by: Flavor,
}

/// What each runtime flavour would do with a file: the refusals (at most one kept per
/// flavour) and the attributes defaulted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Dialect {
    /// One entry per refusing flavour, in [`Flavor::ALL`] order of first refusal.
    pub refusals: Vec<Refusal>,
    /// Missing attributes and their defaults.
    pub defaulted: Vec<Defaulted>,
}

impl Dialect {
    /// Records that `flavors` refuse the file for `reason` at `line`.
    pub fn refuse(&mut self, flavors: &[Flavor], line: usize, reason: impl Into<String>) {
        let reason = reason.into();
        for &flavor in flavors {
            match self.refusals.iter_mut().find(|r| r.flavor == flavor) {
                Some(r) => r.more += 1,
                None => self.refusals.push(Refusal {
                    flavor,
                    line,
                    reason: reason.clone(),
                    more: 0,
                }),
            }
        }
    }

    /// Records a defaulted attribute.
    pub fn defaulted_to(&mut self, attribute: &str, value: impl ToString, by: Flavor) {
        self.defaulted.push(Defaulted {
            attribute: attribute.to_string(),
            value: value.to_string(),
            by,
        });
    }

    /// The refusal of `flavor`, if it refuses the file.
    pub fn refusal(&self, flavor: Flavor) -> Option<&Refusal> {
        self.refusals.iter().find(|r| r.flavor == flavor)
    }

    /// True if `flavor` would load (and could select) the file.
    pub fn loads(&self, flavor: Flavor) -> bool {
        self.refusal(flavor).is_none()
    }

    /// The flavours that would load the file.
    pub fn accepting(&self) -> Vec<Flavor> {
        Flavor::ALL.into_iter().filter(|&f| self.loads(f)).collect()
    }

    /// True if no flavour would load the file.
    pub fn refused_by_all(&self) -> bool {
        self.accepting().is_empty()
    }

    /// One line per refusing flavour: `rccl refuses it: line 12: ... (and 3 more)`.
    pub fn refusal_lines(&self) -> Vec<String> {
        Flavor::ALL
            .into_iter()
            .filter_map(|f| self.refusal(f))
            .map(|r| {
                let more = if r.more > 0 {
                    format!(" (and {} more)", r.more)
                } else {
                    String::new()
                };
                format!(
                    "{} refuses it: line {}: {}{more}",
                    r.flavor.name(),
                    r.line,
                    r.reason
                )
            })
            .collect()
    }

    /// One line naming the defaulted attributes, or `None` when nothing was defaulted.
    pub fn defaulted_line(&self) -> Option<String> {
        if self.defaulted.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .defaulted
            .iter()
            .map(|d| format!("{}={} ({})", d.attribute, d.value, d.by.name()))
            .collect();
        Some(format!("defaulted: {}", list.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_reason_per_flavour_and_counts_the_rest() {
        let mut d = Dialect::default();
        d.refuse(&[Flavor::Rccl], 3, "fused op rcs");
        d.refuse(&[Flavor::Nccl, Flavor::Rccl], 1, "outofplace missing");
        assert_eq!(d.accepting(), vec![Flavor::Legacy]);
        let r = d.refusal(Flavor::Rccl).unwrap();
        assert_eq!((r.line, r.reason.as_str(), r.more), (3, "fused op rcs", 1));
        assert_eq!(
            d.refusal_lines(),
            vec![
                "nccl refuses it: line 1: outofplace missing".to_string(),
                "rccl refuses it: line 3: fused op rcs (and 1 more)".to_string()
            ]
        );
        d.refuse(&[Flavor::Legacy], 1, "no name");
        assert!(d.refused_by_all());
    }
}
