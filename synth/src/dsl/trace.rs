//! The record a front end hands to the compiler: a JSON list of programs, each with its
//! header (`MSCCLProgram` arguments, topology, collective) and its events (copies, reduces,
//! computes, `XML()` and `Check()` calls), every event with the file and line that wrote it. The Python
//! package writes it; [`replay`] feeds it through the same [`Program`] builder as the Rust
//! API.

use super::builder::{Connectivity, Pins, Program};
use super::collective::{Buffer, Collective, Kind};
use super::error::{DslError, DslResult, Loc};
use super::{Options, Policy};
use anyhow::{Context, Result};
use runtime::ir::{Flavor, Protocol};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One traced program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceProgram {
    /// `MSCCLProgram`'s name (the XML `name`).
    pub name: String,
    /// File of the `MSCCLProgram` statement.
    pub file: String,
    /// Its line.
    pub line: u32,
    /// The topology.
    pub topology: TraceTopology,
    /// The collective.
    pub collective: TraceCollective,
    /// Instances.
    pub instances: i64,
    /// Protocol name.
    pub protocol: String,
    /// `auto` or `manual`.
    pub threadblock_policy: String,
    /// Interleaved replication.
    pub interleaved_replication: bool,
    /// Instruction fusion.
    pub instr_fusion: bool,
    /// Hoist the dependencies of local reduce chains into nops before the chain.
    pub dependence_nop: bool,
    /// `priority` (the default) or `program`.
    #[serde(default)]
    pub instr_order: Option<String>,
    /// Operations in program order.
    pub events: Vec<Event>,
}

/// A topology as the front end describes it: a synth spec, explicit links, or both.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceTopology {
    /// Name for messages.
    pub name: String,
    /// Ranks (0 when the spec decides).
    pub ranks: usize,
    /// A synth topology name or file.
    pub spec: Option<String>,
    /// Directed (src, dst) pairs; `None` to take them from the spec.
    pub links: Option<Vec<(usize, usize)>>,
}

/// A collective as the front end describes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceCollective {
    /// `allreduce`, `allgather`, ..., or `custom:NAME`.
    pub kind: String,
    /// Ranks.
    #[serde(default)]
    pub ranks: i64,
    /// Chunks per rank slice.
    #[serde(default)]
    pub chunk_factor: i64,
    /// In place.
    #[serde(default)]
    pub inplace: bool,
    /// Root rank.
    #[serde(default)]
    pub root: i64,
    /// A custom collective's buffer sizes, initial contents (from its `init_buffers()`) and
    /// postcondition (every output slot the program fills, as its final buffers hold it).
    #[serde(default)]
    pub custom: Option<runtime::ir::CustomCollective>,
    /// Whether a custom collective's `check()` holds on the program's final buffers.
    #[serde(default)]
    pub check_ok: Option<bool>,
}

/// A chunk reference: rank, buffer name, index, size.
pub type TraceRef = (i64, String, i64, i64);

/// One recorded event.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Event {
    /// `src.copy(dst...)`.
    Copy {
        /// Source reference.
        src: TraceRef,
        /// Destination rank, buffer, index.
        dst: (i64, String, i64),
        /// Pins (-1 = none).
        sendtb: i64,
        /// Pins (-1 = none).
        recvtb: i64,
        /// Pins (-1 = none).
        ch: i64,
        /// Where.
        file: String,
        /// Where.
        line: u32,
    },
    /// `dst.reduce(src)`.
    Reduce {
        /// Reduced in place.
        dst: TraceRef,
        /// Added.
        src: TraceRef,
        /// Pins (-1 = none).
        sendtb: i64,
        /// Pins (-1 = none).
        recvtb: i64,
        /// Pins (-1 = none).
        ch: i64,
        /// Where.
        file: String,
        /// Where.
        line: u32,
    },
    /// `chunk.compute(expr, seed=..., **scalars)` (synth's extension of MSCCLang).
    Compute {
        /// The chunks computed (output chunks of one rank).
        chunk: TraceRef,
        /// A preset name (`adam`, ...) or statements.
        expr: String,
        /// Per-step scalars, over the preset's defaults.
        #[serde(default)]
        scalars: BTreeMap<String, f64>,
        /// Dropout seed.
        #[serde(default)]
        seed: u64,
        /// Where.
        file: String,
        /// Where.
        line: u32,
    },
    /// `XML()`.
    Xml {
        /// Where.
        file: String,
        /// Where.
        line: u32,
    },
    /// `Check()`.
    Check {
        /// Where.
        file: String,
        /// Where.
        line: u32,
        /// For a custom collective: what its own `check()` returned at this point.
        #[serde(default)]
        ok: Option<bool>,
    },
}

/// Reads a trace file (a JSON list of programs).
pub fn read(path: &str) -> Result<Vec<TraceProgram>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{path}: cannot read"))?;
    serde_json::from_str(&text).map_err(|e| {
        let message = crate::util::escape_line_breaks(&e.to_string());
        anyhow::anyhow!("{path}:{}: bad trace: {message}", e.line())
    })
}

/// What the command line overrides in a program.
#[derive(Debug, Clone, Copy, Default)]
pub struct Overrides {
    /// Instances instead of the program's.
    pub instances: Option<usize>,
    /// Protocol instead of the program's.
    pub protocol: Option<Protocol>,
    /// Target runtime.
    pub flavor: Option<Flavor>,
}

/// A replayed program: the builder, and what its `Check()` calls found.
#[derive(Debug)]
pub struct Replayed {
    /// The program, ready to compile.
    pub program: Program,
    /// One result per `Check()` call, in order.
    pub checks: Vec<DslResult<()>>,
    /// Whether the program called `XML()`.
    pub wants_xml: bool,
    /// The synth topology it can be simulated on, if known.
    pub spec: Option<String>,
}

fn pin(v: i64) -> Option<usize> {
    usize::try_from(v).ok()
}

fn index(v: i64, what: &str, loc: &Loc) -> DslResult<usize> {
    usize::try_from(v).map_err(|_| DslError::new(loc, format!("{what} {v} is negative")))
}

/// Replays a traced program through the builder; the first bad operation is the error.
pub fn replay(t: &TraceProgram, o: &Overrides) -> DslResult<Replayed> {
    let loc = Loc::new(&t.file, t.line);
    let collective = collective(&t.collective, &loc)?;
    let topology = connectivity(&t.topology, &loc)?;
    let options = options(t, o, &loc)?;
    let spec = topology.spec.clone();
    let program = Program::at(&t.name, topology, collective, options, loc)?;
    let mut checks = Vec::new();
    let mut wants_xml = false;
    for e in &t.events {
        match e {
            Event::Copy {
                src,
                dst,
                sendtb,
                recvtb,
                ch,
                file,
                line,
            } => {
                let pins = pins(*sendtb, *recvtb, *ch);
                replay_copy(&program, src, dst, pins, Loc::new(file, *line))?;
            }
            Event::Reduce {
                dst,
                src,
                sendtb,
                recvtb,
                ch,
                file,
                line,
            } => {
                let pins = pins(*sendtb, *recvtb, *ch);
                replay_reduce(&program, dst, src, pins, Loc::new(file, *line))?;
            }
            Event::Compute {
                chunk,
                expr,
                scalars,
                seed,
                file,
                line,
            } => {
                let at = Loc::new(file, *line);
                let c = reference(chunk, &at)?;
                let compute = super::builder::compute_of(expr, scalars.clone(), *seed)
                    .map_err(|m| DslError::new(&at, m))?;
                let pins = Pins::default();
                program.with_tracer(|tr| tr.compute((c.0, &c.1, c.2, c.3), compute, pins, at))?;
            }
            Event::Xml { .. } => wants_xml = true,
            Event::Check { file, line, ok } => {
                checks.push(check_result(&program, &Loc::new(file, *line), *ok));
            }
        }
    }
    Ok(Replayed {
        program,
        checks,
        wants_xml,
        spec,
    })
}

/// The traced collective: a named one, or a custom one with the conditions its
/// `init_buffers()` recorded and a `check()` that held.
fn collective(c: &TraceCollective, loc: &Loc) -> DslResult<Collective> {
    let bad = |m: String| DslError::new(loc, m);
    let ranks = index(c.ranks, "num_ranks", loc)?;
    if let Some(name) = c.kind.strip_prefix("custom:") {
        let conditions = c.custom.clone().ok_or_else(|| {
            bad(format!(
                "custom collective {name}: the trace has no conditions (its init_buffers())"
            ))
        })?;
        if c.check_ok == Some(false) {
            return Err(bad(format!(
                "custom collective {name}: its check() fails on the program's final buffers"
            )));
        }
        // msccl-tools keeps a custom collective's input and output apart whatever its
        // `inplace` flag (only the built-in collectives alias them), so the program is one
        // for distinct buffers and is written out of place.
        Collective::custom(
            ranks,
            index(c.chunk_factor, "chunk_factor", loc)?,
            false,
            conditions,
        )
        .map_err(|e| bad(format!("custom collective {name}: {e}")))
    } else {
        let kind = Kind::parse(&c.kind).map_err(|e| bad(e.to_string()))?;
        Collective::new(
            kind,
            ranks,
            index(c.chunk_factor, "chunk_factor", loc)?,
            c.inplace,
            index(c.root, "root", loc)?,
        )
        .map_err(|e| bad(e.to_string()))
    }
}

/// The traced topology: its explicit links, else the links of its synth spec.
fn connectivity(t: &TraceTopology, loc: &Loc) -> DslResult<Connectivity> {
    let bad = |m: String| DslError::new(loc, m);
    match (&t.links, &t.spec) {
        (Some(links), spec) => Ok(Connectivity {
            name: t.name.clone(),
            ranks: t.ranks,
            links: links.iter().copied().collect::<BTreeSet<_>>(),
            spec: spec.clone(),
        }),
        (None, Some(spec)) => Connectivity::load(spec).map_err(|e| bad(format!("{e:#}"))),
        (None, None) => Err(bad("the topology has neither links nor a synth name".into())),
    }
}

/// The program's compile options, with the command line's overrides applied.
fn options(t: &TraceProgram, o: &Overrides, loc: &Loc) -> DslResult<Options> {
    let bad = |m: String| DslError::new(loc, m);
    let protocol = match o.protocol {
        Some(p) => p,
        None => Protocol::from_name(&t.protocol).ok_or_else(|| {
            bad(format!(
                "unknown protocol '{}' (Simple, LL, LL128)",
                t.protocol
            ))
        })?,
    };
    let policy = match t.threadblock_policy.as_str() {
        "auto" => Policy::Auto,
        "manual" => Policy::Manual,
        other => return Err(bad(format!("unknown threadblock policy '{other}'"))),
    };
    let program_order = match t.instr_order.as_deref() {
        None | Some("priority") => false,
        Some("program") => true,
        Some(other) => {
            return Err(bad(format!(
                "unknown instr_order '{other}' (priority or program)"
            )))
        }
    };
    let instances = match o.instances {
        Some(i) => i,
        None => index(t.instances, "instances", loc)?,
    };
    Ok(Options {
        instances,
        protocol,
        policy,
        interleaved_replication: t.interleaved_replication,
        instr_fusion: t.instr_fusion,
        dependence_nop: t.dependence_nop,
        program_order,
        flavor: o.flavor.unwrap_or(Flavor::Nccl),
    })
}

/// Replays a traced `src.copy(dst...)` at `at`.
fn replay_copy(
    program: &Program,
    src: &TraceRef,
    dst: &(i64, String, i64),
    pins: Pins,
    at: Loc,
) -> DslResult<()> {
    let s = reference(src, &at)?;
    let d = (
        index(dst.0, "rank", &at)?,
        Buffer::from_name(&dst.1),
        index(dst.2, "index", &at)?,
    );
    program.with_tracer(|tr| tr.copy((s.0, &s.1, s.2, s.3), d.0, &d.1, d.2, pins, at.clone()))
}

/// Replays a traced `dst.reduce(src)` at `at`.
fn replay_reduce(
    program: &Program,
    dst: &TraceRef,
    src: &TraceRef,
    pins: Pins,
    at: Loc,
) -> DslResult<()> {
    let d = reference(dst, &at)?;
    let s = reference(src, &at)?;
    program.with_tracer(|tr| {
        tr.reduce(
            (d.0, &d.1, d.2, d.3),
            (s.0, &s.1, s.2, s.3),
            pins,
            at.clone(),
        )
    })
}

/// The result of a traced `Check()` at `at`: for a custom collective what its own `check()`
/// returned (`ok`), else the builder's check of the buffers so far.
fn check_result(program: &Program, at: &Loc, ok: Option<bool>) -> DslResult<()> {
    match ok {
        // A custom collective's check() ran in the front end.
        Some(true) => Ok(()),
        Some(false) => Err(DslError::new(
            at,
            "Check failed: the custom collective's check() returned False",
        )),
        None => program.with_tracer(|tr| tr.check(at)),
    }
}

fn pins(sendtb: i64, recvtb: i64, ch: i64) -> Pins {
    Pins {
        sendtb: pin(sendtb),
        recvtb: pin(recvtb),
        ch: pin(ch),
    }
}

fn reference(r: &TraceRef, at: &Loc) -> DslResult<(usize, Buffer, usize, usize)> {
    Ok((
        index(r.0, "rank", at)?,
        Buffer::from_name(&r.1),
        index(r.2, "index", at)?,
        index(r.3, "size", at)?,
    ))
}
