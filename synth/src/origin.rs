//! Where an algorithm comes from: its typed provenance ([`Family`], [`Origin`]) and the one
//! renderer of algorithm names built from it (`COLL-TOPO[-TAG]-sS-rR-cC[-chC][-gK][-rv][-sv][-ac][-2r][-lr][-os][-ps|-pa]`).
//!
//! Code that decides anything about an algorithm (which allreduce halves pair, which are
//! renumbered into messages) reads its [`Origin`], never its name: the name is for people
//! and file names only, and always fits the runtimes' 63 characters with `-inplace`.

use crate::collective::Kind;
use serde::{Deserialize, Serialize};

/// Which cost model a greedy schedule was matched under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GreedyModel {
    /// Distances in hops.
    Hops,
    /// Distances in per-link alpha delays.
    Delays,
}

/// The engine or construction that made an algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(tag = "family", rename_all = "kebab-case")]
pub enum Family {
    /// Read from a file or written by hand: its name is kept as it was.
    #[default]
    External,
    /// Nothing to deliver: zero steps.
    Empty,
    /// An exact k-synchronous SMT (z3) answer.
    Smt,
    /// A MILP (HiGHS) answer under a sketch.
    Milp,
    /// Greedy matching, one round per step (`levelled`: steps regrouped by level).
    Greedy {
        /// The distance model of the matching.
        model: GreedyModel,
        /// Whether the steps were regrouped by level.
        levelled: bool,
    },
    /// Packed trees laid out by depth.
    Trees,
    /// Packed trees list-scheduled one round per step.
    Listed,
    /// Trees grown step by step, the same for every root up to the symmetry group.
    Grown,
    /// NCCL's rings as path trees.
    Rings,
    /// A broadcast's shallow trees (`own_channels`: each piece on a channel of its own).
    Shallow {
        /// Whether each piece runs on a channel of its own.
        own_channels: bool,
    },
    /// The dimension-rotated bucket allgather of a square 2-D torus.
    Bucket,
    /// The rail ring across identical nodes.
    Rails {
        /// Its form: plain, with shortcuts to the next node, or in coalesced messages.
        form: RailForm,
    },
    /// Rings whose last hop takes the wider in-link (one node).
    ShortcutRings {
        /// Whether each link's sends were reordered by list scheduling.
        retimed: bool,
    },
    /// Shortcut rings on every node of a cluster, the other nodes' pieces over rails.
    RailShortcutRings,
    /// [`Family::RailShortcutRings`] whose remote rounds end early, the rail peer relaying.
    RailShortcutRelay {
        /// Whether each link's sends were reordered by list scheduling.
        retimed: bool,
    },
    /// The one-shot allreduce: every rank receives every other rank's whole input and
    /// reduces it locally ([`crate::allreduce_shapes`]).
    OneShot,
    /// The two-shot allreduce over all pairs: each rank reduces its slice from every rank,
    /// then sends it to every rank ([`crate::allreduce_shapes`]).
    TwoShot,
    /// A direct SMT answer in which a reduction may end on many ranks
    /// ([`crate::smt::direct`]).
    DirectSmt,
    /// The direct greedy schedule of partial sums: reduced up a tree per address, copied
    /// out from where it completes ([`crate::greedy::direct`]).
    DirectGreedy,
    /// NCCL's trees (chains in a node, double binary trees across nodes) as an allreduce:
    /// reduce up each tree then broadcast down ([`crate::allreduce_shapes::nccl_trees`]).
    NcclTrees,
    /// An allreduce made of a reduce to one rank then a broadcast from it (trees).
    ReduceBroadcast {
        /// The reduce's family.
        reduce: Box<Family>,
        /// The broadcast's family.
        broadcast: Box<Family>,
    },
    /// A collective that reduces onto several ranks, as a reduce phase (each piece onto one
    /// destination) then a spread phase ([`crate::collective::Collective::phases`]).
    ReduceSpread {
        /// The reduce phase's family.
        reduce: Box<Family>,
        /// The spread phase's family.
        spread: Box<Family>,
    },
    /// An allreduce composed of a reduce-scatter and an allgather.
    Composed {
        /// The reduce-scatter half's family.
        reduce_scatter: Box<Family>,
        /// The allgather half's family.
        allgather: Box<Family>,
    },
}

/// The forms of the rail ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RailForm {
    /// Every piece around the rails, then forwarded within the node.
    Plain,
    /// Some pieces of each ring send go straight to other GPUs of the next node.
    Shortcut,
    /// Pieces sent several to a message.
    Coalesced,
}

impl Family {
    /// The family's part of an algorithm name (`trees`, `greedy-levelled`, ...); `None` for
    /// the untagged names of SMT answers, empty algorithms and external ones.
    pub fn tag(&self) -> Option<String> {
        let tag = match self {
            Family::External | Family::Empty | Family::Smt => return None,
            Family::Milp => "milp",
            Family::Greedy { model, levelled } => {
                let base = match model {
                    GreedyModel::Hops => "greedy",
                    GreedyModel::Delays => "greedy-alpha",
                };
                return Some(if *levelled {
                    format!("{base}-levelled")
                } else {
                    base.to_string()
                });
            }
            Family::Trees => "trees",
            Family::Listed => "listed",
            Family::Grown => "grown",
            Family::Rings => "rings",
            Family::Shallow { .. } => "shallow",
            Family::Bucket => "bucket",
            Family::Rails { form } => match form {
                RailForm::Plain => "rails",
                RailForm::Shortcut => "rails-shortcut",
                RailForm::Coalesced => "rails-coalesced",
            },
            Family::ShortcutRings { retimed: false } => "srings",
            Family::ShortcutRings { retimed: true } => "srings-lst",
            Family::RailShortcutRings => "rail-srings",
            Family::RailShortcutRelay { retimed: false } => "rail-srelay",
            Family::RailShortcutRelay { retimed: true } => "rail-srelay-lst",
            Family::OneShot => "oneshot",
            Family::TwoShot => "twoshot",
            Family::NcclTrees => "nccltrees",
            Family::DirectSmt => "direct-smt",
            Family::DirectGreedy => "direct-greedy",
            Family::ReduceBroadcast { broadcast, .. } => {
                return Some(broadcast.tag().map_or("rb".into(), |b| format!("rb-{b}")));
            }
            Family::ReduceSpread { spread, .. } => {
                return Some(
                    spread
                        .tag()
                        .map_or("spread".into(), |b| format!("spread-{b}")),
                );
            }
            Family::Composed {
                reduce_scatter,
                allgather,
            } => {
                // Halves of one structure go by the allgather's tag (names stay short).
                return match (reduce_scatter.tag(), allgather.tag()) {
                    (Some(_), Some(b)) if reduce_scatter.pairs_with(allgather) => Some(b),
                    (Some(a), Some(b)) => Some(format!("{a}-{b}")),
                    (Some(a), None) | (None, Some(a)) => Some(a),
                    (None, None) => None,
                };
            }
        };
        Some(tag.to_string())
    }

    /// The structure an allreduce half counts as when halves are paired: the relayed rail
    /// shortcut rings (an allgather only) pair with the rail shortcut rings' reduce-scatter.
    fn structure(&self) -> &Family {
        match self {
            Family::RailShortcutRelay { retimed: false } => &Family::RailShortcutRings,
            other => other,
        }
    }

    /// Whether an allreduce half of this family and one of `other` are halves of one
    /// structure (trees with trees, rails with rails, ...): both come from a named
    /// construction or engine (not an SMT answer) of the same structure.
    pub fn pairs_with(&self, other: &Family) -> bool {
        self.tag().is_some() && other.tag().is_some() && self.structure() == other.structure()
    }
}

/// An algorithm's provenance: its family and how its steps were staged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Origin {
    /// The engine or construction that made it.
    #[serde(flatten)]
    pub family: Family,
    /// The channel groups its steps were staged in (named `-gK`), where a stage layout was
    /// chosen for it; `None` for one group or groups the construction declared itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<usize>,
    /// Lowered with unfused reductions received in two steps (`r` into the accumulator,
    /// then `re`; named `-2r`): the twin of the same schedule lowered with a temporary
    /// (`r`, `cpy`, `re`), which the simulation tells apart (`lower::two_step_twin`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub two_step_receives: bool,
    /// Lowered with the reductions that several messages of one step make into one
    /// accumulator received into temporaries and reduced on local threadblocks in the order
    /// the messages should arrive (named `-lr`): no receive then waits for another's
    /// reduction, so no sender stalls on a full connection, at the cost of a pass through
    /// the rank's memory per message (`lower::local_reduction_twin`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local_reductions: bool,
    /// Lowered with every address on channels of its own (named `-ac`): no threadblock
    /// then holds the messages of two addresses, so a receive whose reduction waits on
    /// another tree never holds up the messages of the trees behind it in that
    /// threadblock, at the cost of more threadblocks sharing each link
    /// (`lower::address_channel_twin`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub address_channels: bool,
    /// Scheduled on the fabric's rail view (named `-rv`): its links between nodes only
    /// between ranks of one local index, so that each NIC talks to one peer per other node
    /// ([`crate::topology::shape::rail_view`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rail_view: bool,
    /// Scheduled on the fabric's split view (named `-sv`): each switch constraint that
    /// several ranks share on both sides (a NIC two GPUs share) split into equal shares, one
    /// per rank, as the runtime shares it when those ranks send side by side
    /// ([`crate::topology::shape::split_view`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split_view: bool,
    /// Lowered with a connection's channels free to overlap the slices the runtime replays
    /// the program for (named `-os`): a connection split over several channels keeps its
    /// first transfer on its first channel, which starts the next slice once it has sent its
    /// part of this one, beside the last channel. Where that fills idle link time it runs
    /// faster; where it slows the transfers the rest of the slice waits for, slower
    /// (`lower::overlapping_slices_twin`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overlapping_slices: bool,
    /// Which of its sends are paced (named `-ps` or `-pa`): each waits for the rank's last
    /// send of the paced step before, so that data that is ready from the start (a leaf's
    /// own contribution, a root's own piece) does not run ahead and share a port or NIC with
    /// the messages the next steps wait for; the run then keeps to the schedule's steps
    /// (`lower::paced_twins`).
    #[serde(
        default,
        alias = "paced_sends",
        deserialize_with = "Pacing::from_kind_or_flag",
        skip_serializing_if = "Pacing::is_unpaced"
    )]
    pub pacing: Pacing,
}

/// Which sends of a schedule its lowering paces ([`Origin::pacing`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pacing {
    /// None: each send goes once its data is there.
    #[default]
    Unpaced,
    /// The sends of its reducing steps, or of every step where none reduces (named `-ps`).
    Reductions,
    /// The sends of every step, of a schedule that has reducing and copying steps (an
    /// allreduce: both halves; named `-pa`).
    Every,
}

impl Pacing {
    /// Whether no send is paced.
    pub fn is_unpaced(&self) -> bool {
        *self == Pacing::Unpaced
    }

    /// Reads a pacing, or the flag older algorithm files wrote (`"paced_sends": true`, the
    /// reducing steps paced).
    fn from_kind_or_flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Pacing, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum KindOrFlag {
            Kind(Pacing),
            Flag(bool),
            Other(serde::de::IgnoredAny),
        }
        match KindOrFlag::deserialize(d)? {
            KindOrFlag::Kind(kind) => Ok(kind),
            KindOrFlag::Flag(true) => Ok(Pacing::Reductions),
            KindOrFlag::Flag(false) => Ok(Pacing::Unpaced),
            KindOrFlag::Other(_) => Err(serde::de::Error::custom(
                "origin.pacing: expected \"unpaced\", \"reductions\" or \"every\" (older files: \"paced_sends\": true or false)",
            )),
        }
    }

    /// The name suffix of a twin paced this way (empty where unpaced).
    pub fn suffix(self) -> &'static str {
        match self {
            Pacing::Unpaced => "",
            Pacing::Reductions => "-ps",
            Pacing::Every => "-pa",
        }
    }
}

impl Origin {
    /// The origin of an algorithm of `family` in one stage.
    pub fn of(family: Family) -> Origin {
        Origin {
            family,
            stages: None,
            two_step_receives: false,
            local_reductions: false,
            address_channels: false,
            rail_view: false,
            split_view: false,
            overlapping_slices: false,
            pacing: Pacing::Unpaced,
        }
    }
}

impl From<Family> for Origin {
    fn from(family: Family) -> Origin {
        Origin::of(family)
    }
}

/// Longest algorithm name whose in-place program (`NAME-inplace`) the runtimes still take
/// (their name field holds 63 characters).
pub const MAX_NAME: usize = runtime::xml::MAX_NAME - "-inplace".len();

/// A topology's name as it appears in algorithm and file names (`:` and `/` made `_`).
pub fn topology_label(topology: &str) -> String {
    topology.replace([':', '/'], "_")
}

/// What an algorithm's name is rendered from.
#[derive(Debug, Clone, Copy)]
pub struct NameParts<'a> {
    /// The collective.
    pub kind: Kind,
    /// The topology's name.
    pub topology: &'a str,
    /// Its provenance.
    pub origin: &'a Origin,
    /// Steps S.
    pub steps: usize,
    /// Rounds R.
    pub rounds: u32,
    /// Chunks per rank C.
    pub chunks: usize,
}

/// The one name renderer: `COLL-TOPO[-TAG]-sS-rR-cC[-chC][-gK][-rv][-sv][-ac][-2r][-lr][-os][-ps|-pa]`, cut to [`MAX_NAME`] by
/// dropping the end of the tag (so steps, rounds, chunks and stages stay).
pub fn render(parts: NameParts) -> String {
    let mut head = format!("{}-{}-", parts.kind, topology_label(parts.topology));
    if let Some(tag) = parts.origin.family.tag() {
        head.push_str(&tag);
        head.push('-');
    }
    let mut tail = format!("s{}-r{}-c{}", parts.steps, parts.rounds, parts.chunks);
    if let Family::Shallow { own_channels: true } = parts.origin.family {
        tail.push_str(&format!("-ch{}", parts.chunks));
    }
    if let Some(k) = parts.origin.stages {
        tail.push_str(&format!("-g{k}"));
    }
    if parts.origin.rail_view {
        tail.push_str("-rv");
    }
    if parts.origin.split_view {
        tail.push_str("-sv");
    }
    if parts.origin.address_channels {
        tail.push_str("-ac");
    }
    if parts.origin.two_step_receives {
        tail.push_str("-2r");
    }
    if parts.origin.local_reductions {
        tail.push_str("-lr");
    }
    if parts.origin.overlapping_slices {
        tail.push_str("-os");
    }
    tail.push_str(parts.origin.pacing.suffix());
    fit(&head, &tail, MAX_NAME)
}

/// `head` + `tail` in at most `most` characters: the end of `head` gives way first.
fn fit(head: &str, tail: &str, most: usize) -> String {
    if head.len() + tail.len() <= most {
        return format!("{head}{tail}");
    }
    let keep = most.saturating_sub(tail.len());
    let cut: String = head.chars().take(keep.saturating_sub(1)).collect();
    format!("{}-{tail}", cut.trim_end_matches('-'))
        .chars()
        .take(most)
        .collect()
}

/// `name` cut to at most `most` characters by dropping the end of its engine tag (what
/// precedes the last `-s<steps>`), so that the steps, rounds, chunks and groups stay; a
/// name without that mark is cut at its end. Unlike [`render`], a cut may end at a dash
/// (a name's length is then exactly `most`, as names with a hash always were).
pub fn shortened(name: &str, most: usize) -> String {
    if name.len() <= most {
        return name.to_string();
    }
    let marker = name
        .match_indices("-s")
        .filter(|(i, _)| name[i + 2..].starts_with(|c: char| c.is_ascii_digit()))
        .last()
        .map_or(name.len(), |(i, _)| i);
    let excess = name.len() - most;
    let cut = marker.saturating_sub(excess);
    let joined = format!("{}{}", &name[..cut], &name[marker..]);
    joined.chars().take(most).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(family: Family, stages: Option<usize>) -> String {
        render(NameParts {
            kind: Kind::AllGather,
            topology: "torus-2d:4x4",
            origin: &Origin {
                family,
                stages,
                two_step_receives: false,
                local_reductions: false,
                address_channels: false,
                rail_view: false,
                split_view: false,
                overlapping_slices: false,
                pacing: Pacing::Unpaced,
            },
            steps: 3,
            rounds: 7,
            chunks: 2,
        })
    }

    #[test]
    fn names_are_rendered_from_the_family() {
        assert_eq!(name(Family::Smt, None), "allgather-torus-2d_4x4-s3-r7-c2");
        assert_eq!(
            name(Family::Trees, Some(2)),
            "allgather-torus-2d_4x4-trees-s3-r7-c2-g2"
        );
        assert_eq!(
            name(Family::Shallow { own_channels: true }, None),
            "allgather-torus-2d_4x4-shallow-s3-r7-c2-ch2"
        );
        let greedy = Family::Greedy {
            model: GreedyModel::Delays,
            levelled: true,
        };
        assert_eq!(
            name(greedy, None),
            "allgather-torus-2d_4x4-greedy-alpha-levelled-s3-r7-c2"
        );
    }

    #[test]
    fn halves_of_one_structure_go_by_the_allgathers_tag() {
        let composed = |rs, ag| Family::Composed {
            reduce_scatter: Box::new(rs),
            allgather: Box::new(ag),
        };
        let relay = Family::RailShortcutRelay { retimed: false };
        assert!(Family::RailShortcutRings.pairs_with(&relay));
        assert_eq!(
            composed(Family::RailShortcutRings, relay).tag().as_deref(),
            Some("rail-srelay")
        );
        assert_eq!(
            composed(Family::Trees, Family::Rings).tag().as_deref(),
            Some("trees-rings")
        );
        assert_eq!(composed(Family::Smt, Family::Smt).tag(), None);
        assert!(!Family::Smt.pairs_with(&Family::Smt));
    }

    #[test]
    fn a_long_name_gives_up_the_end_of_its_tag() {
        let name = "allreduce-mi250-16x2-rail-srelay-lst-s114-r172-c18-g4-ab6b24";
        let cut = shortened(name, 55);
        assert_eq!(
            cut,
            "allreduce-mi250-16x2-rail-srela-s114-r172-c18-g4-ab6b24"
        );
        assert_eq!(shortened("short-s1-r1-c1", 55), "short-s1-r1-c1");
        assert_eq!(shortened("no-mark-at-all", 7), "no-mark");
    }

    #[test]
    fn every_name_fits_the_runtimes() {
        let long = Family::Composed {
            reduce_scatter: Box::new(Family::Greedy {
                model: GreedyModel::Delays,
                levelled: true,
            }),
            allgather: Box::new(Family::Greedy {
                model: GreedyModel::Hops,
                levelled: false,
            }),
        };
        let n = render(NameParts {
            kind: Kind::AllReduce,
            topology: "torus3d-4x4x4",
            origin: &Origin {
                family: long,
                stages: Some(12),
                two_step_receives: true,
                // A paced twin is never lowered with local reductions.
                local_reductions: false,
                address_channels: true,
                rail_view: false,
                split_view: false,
                overlapping_slices: false,
                pacing: Pacing::Reductions,
            },
            steps: 121,
            rounds: 4600,
            chunks: 16,
        });
        assert!(n.len() <= MAX_NAME, "{n}");
        assert!(n.ends_with("-s121-r4600-c16-g12-ac-2r-ps"), "{n}");
        assert!(n.starts_with("allreduce-torus3d-4x4x4-gre"), "{n}");
        assert!(!n.contains("--"), "{n}");
        // On a rail view as well: the whole tag gives way.
        let origin = Origin {
            rail_view: true,
            split_view: true,
            ..Origin::of(Family::Listed)
        };
        let n = render(NameParts {
            kind: Kind::AllReduce,
            topology: "torus3d-4x4x4x12345",
            origin: &Origin {
                stages: Some(12),
                address_channels: true,
                two_step_receives: true,
                overlapping_slices: true,
                pacing: Pacing::Every,
                ..origin
            },
            steps: 121,
            rounds: 4600,
            chunks: 16,
        });
        assert!(n.len() <= MAX_NAME, "{n}");
        assert!(n.ends_with("-s121-r4600-c16-g12-rv-sv-ac-2r-os-pa"), "{n}");
        assert!(!n.contains("--"), "{n}");
    }

    #[test]
    fn pacing_reads_its_kind_and_the_older_flag() {
        let read = |json: &str| serde_json::from_str::<Origin>(json).unwrap().pacing;
        assert_eq!(read(r#"{"family": "listed"}"#), Pacing::Unpaced);
        assert_eq!(
            read(r#"{"family": "listed", "pacing": "every"}"#),
            Pacing::Every
        );
        assert_eq!(
            read(r#"{"family": "listed", "paced_sends": true}"#),
            Pacing::Reductions
        );
        assert_eq!(
            read(r#"{"family": "listed", "paced_sends": false}"#),
            Pacing::Unpaced
        );
        let bad = serde_json::from_str::<Origin>(r#"{"family": "listed", "pacing": "often"}"#);
        let message = bad.unwrap_err().to_string();
        assert!(message.starts_with("origin.pacing: expected"), "{message}");
        let origin = Origin {
            pacing: Pacing::Reductions,
            ..Origin::of(Family::Listed)
        };
        let json = serde_json::to_string(&origin).unwrap();
        assert!(json.contains(r#""pacing":"reductions""#), "{json}");
        assert_eq!(read(&json), Pacing::Reductions);
    }
}
