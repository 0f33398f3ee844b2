//! The XML reader: the runtime's lexical rules (see `lexer`) plus every check its parser
//! makes and the ones it leaves out (msccl-ir.md §1.12), then the translation to a
//! [`Program`]: `nop`s fold into the dependencies of the next step and XML step numbers
//! become in-memory indices.

use super::dialect::Dialect;
use super::lexer::{parse_streaming, Element};
use super::{XmlError, MAX_NGPUS, MAX_REDUCE_FUSION};
use crate::ir::{
    Buffer, Collective, Dep, Flavor, Gpu, Op, Program, Protocol, Slot, Step, Threadblock,
};
use crate::limits::{self, Limits};
use crate::semantics::Semantics;
use std::collections::HashMap;
use std::path::Path;

/// Channels the executor supports (`MAXCHANNELS`).
const MAX_CHANNELS: i64 = Limits::LARGEST.max_channels as i64;
/// Largest threadblock count of any runtime (executor).
const MAX_TBS: i64 = Limits::LARGEST.max_tbs as i64;
/// Largest step count per threadblock of any runtime (legacy).
const MAX_STEPS: usize = Limits::LARGEST.max_steps;
/// `cnt` must stay below this.
const MAX_COUNT: i64 = limits::MAX_COUNT as i64 + 1;
/// Offsets are stored as int16.
const MAX_OFFSET: i64 = limits::MAX_OFFSET as i64;
/// `depid` is stored as int8.
const MAX_DEPID: i64 = limits::MAX_DEPID as i64;

/// Reads an MSCCL XML file.
pub fn read_file(path: impl AsRef<Path>) -> Result<Program, XmlError> {
    read_file_dialect(path).map(|(p, _)| p)
}

/// Reads an MSCCL XML file, with what each runtime flavour would do with it.
pub fn read_file_dialect(path: impl AsRef<Path>) -> Result<(Program, Dialect), XmlError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| {
        XmlError::new(
            0,
            "",
            None,
            format!(
                "Could not open MSCCL XML algorithm file {}: {e}",
                path.display()
            ),
        )
    })?;
    read_str_dialect(&text)
}

/// Reads MSCCL XML text into a [`Program`] (see [`read_str_dialect`]).
pub fn read_str(text: &str) -> Result<Program, XmlError> {
    read_str_dialect(text).map(|(p, _)| p)
}

/// Reads MSCCL XML text of any runtime's dialect into a [`Program`]: it accepts what at least
/// one runtime flavour loads, defaults a missing attribute as the flavour that accepts the
/// file does, and says in the [`Dialect`] which flavours would refuse it and why. What no
/// runtime loads, or what one would load but mis-execute, is an error. Each `<gpu>` element
/// is turned into its part of the program as soon as it is read, so the document is never
/// held as a tree.
pub fn read_str_dialect(text: &str) -> Result<(Program, Dialect), XmlError> {
    let mut dialect = Dialect::default();
    let mut header: Option<Header> = None;
    let mut gpus: Vec<Option<Gpu>> = Vec::new();
    let mut elements = ElementCount::default();
    let mut start = |top: &Element| -> Result<Header, XmlError> {
        if top.name != "algo" {
            return Err(XmlError::new(
                top.line,
                top.name,
                None,
                "the top element must be algo",
            ));
        }
        let custom = custom_comment(text)?;
        let h = read_algo(top, custom, &mut dialect)?;
        refused_by_all(&dialect)?;
        Ok(h)
    };
    let mut gpu_dialect = Dialect::default();
    let top = parse_streaming(text, |top, child| {
        if header.is_none() {
            let h = start(top)?;
            gpus = vec![None; h.ngpus];
            header = Some(h);
        }
        let h = header.as_ref().expect("set above");
        expect_name(&child, "gpu")?;
        elements.add(&child);
        let gpu = read_gpu(&child, h, &mut gpu_dialect)?;
        let rank = gpu.rank;
        if gpus[rank].replace(gpu).is_some() {
            return Err(XmlError::new(
                child.line,
                "gpu",
                Some("id"),
                format!("duplicate gpu id {rank}"),
            ));
        }
        Ok(())
    })?;
    let header = match header {
        Some(h) => h,
        None => {
            let h = start(&top)?;
            gpus = vec![None; h.ngpus];
            h
        }
    };
    elements.check()?;
    for r in gpu_dialect.refusals {
        dialect.refuse(&[r.flavor], r.line, r.reason);
        if let Some(kept) = dialect.refusals.iter_mut().find(|k| k.flavor == r.flavor) {
            kept.more += r.more;
        }
    }
    refused_by_all(&dialect)?;
    let gpus = gpus
        .into_iter()
        .enumerate()
        .map(|(rank, g)| g.unwrap_or_else(|| empty_gpu(rank)))
        .collect();
    let program = Program {
        name: header.name,
        collective: header.sem.collective,
        root: header.sem.root,
        protocol: header.protocol,
        ngpus: header.ngpus,
        nchunksperloop: header.sem.nchunks,
        inplace: header.inplace,
        outofplace: header.outofplace,
        min_bytes: header.min_bytes,
        max_bytes: header.max_bytes,
        gpus,
        custom: (header.sem.collective == Collective::Custom)
            .then_some(header.custom)
            .flatten(),
        compute: None,
    };
    Ok((program, dialect))
}

/// A reason cut to 75 characters, so that three fit in one line of an error.
fn shorten(reason: &str) -> String {
    const MOST: usize = 75;
    match reason.char_indices().nth(MOST) {
        Some((at, _)) => format!("{}...", &reason[..at]),
        None => reason.to_string(),
    }
}

/// The error when no flavour would load the file: each flavour's first reason, one line.
fn refused_by_all(dialect: &Dialect) -> Result<(), XmlError> {
    if !dialect.refused_by_all() {
        return Ok(());
    }
    let first = &dialect.refusals[0];
    let reasons: Vec<String> = dialect
        .refusals
        .iter()
        .map(|r| {
            format!(
                "{} (line {}): {}",
                r.flavor.name(),
                r.line,
                shorten(&r.reason)
            )
        })
        .collect();
    Err(XmlError::new(
        first.line,
        "",
        None,
        format!("no MSCCL runtime loads this file: {}", reasons.join("; ")),
    ))
}

/// What the runtimes' parser holds when it loads a rank (msccl-ir.md §1.1): the `algo`, every
/// `gpu` element of the file, and that rank's `tb` and `step` elements, nops included. It
/// stops once it holds `MAX_NODES` (4096), so at most 4095 load.
#[derive(Default)]
struct ElementCount {
    /// `gpu` elements seen.
    gpus: usize,
    /// The largest `tb` + `step` count of one rank: (count, line of its gpu, rank).
    largest: Option<(usize, usize, usize)>,
}

impl ElementCount {
    /// Counts a `gpu` element and its subtree.
    fn add(&mut self, gpu: &Element) {
        self.gpus += 1;
        let own = gpu.children.len()
            + gpu
                .children
                .iter()
                .map(|tb| tb.children.len())
                .sum::<usize>();
        if self.largest.is_none_or(|(n, _, _)| own > n) {
            let rank = gpu.attr("id").and_then(|v| v.parse().ok()).unwrap_or(0);
            self.largest = Some((own, gpu.line, rank));
        }
    }

    /// The error of the runtimes' parser where the busiest rank does not fit.
    fn check(&self) -> Result<(), XmlError> {
        let Some((own, line, rank)) = self.largest else {
            return Ok(());
        };
        let elements = 1 + self.gpus + own;
        if elements <= limits::MAX_RANK_ELEMENTS {
            return Ok(());
        }
        Err(XmlError::new(line, "gpu", None, format!(
            "Error : XML parser is limited to 1024 nodes (MAX_NODES 4096): loading rank {rank} holds {elements} elements (algo, {} gpu, its tb and step elements); at most {} load",
            self.gpus,
            limits::MAX_RANK_ELEMENTS
        )))
    }
}

/// The marker of the comment that carries a custom collective's conditions.
pub const CUSTOM_COMMENT: &str = "synth-custom";

/// The conditions of a custom collective from a `<!-- synth-custom {json} -->` comment
/// before the top element (the runtimes skip comments), if there is one.
fn custom_comment(text: &str) -> Result<Option<crate::ir::CustomCollective>, XmlError> {
    let mut rest = text;
    let mut line = 1;
    loop {
        let trimmed = rest.trim_start_matches([' ', '\n', '\r']);
        line += rest[..rest.len() - trimmed.len()].matches('\n').count();
        let Some(body) = trimmed.strip_prefix("<!--") else {
            return Ok(None);
        };
        let Some(end) = body.find("-->") else {
            return Ok(None);
        };
        let comment = body[..end].trim();
        if let Some(json) = comment.strip_prefix(CUSTOM_COMMENT) {
            return serde_json::from_str(json.trim()).map(Some).map_err(|e| {
                XmlError::new(
                    line,
                    "",
                    None,
                    format!("the {CUSTOM_COMMENT} comment is not a custom collective: {e}"),
                )
            });
        }
        line += body[..end].matches('\n').count();
        rest = &body[end + 3..];
    }
}

fn empty_gpu(rank: usize) -> Gpu {
    Gpu {
        rank,
        input_chunks: 0,
        output_chunks: 0,
        scratch_chunks: 0,
        threadblocks: Vec::new(),
    }
}

fn expect_name(el: &Element, name: &str) -> Result<(), XmlError> {
    if el.name == name {
        return Ok(());
    }
    Err(XmlError::new(
        el.line,
        el.name,
        None,
        format!(
            "unexpected element {} (expected {name}; the runtime would skip it silently)",
            el.name
        ),
    ))
}

// ---------------------------------------------------------------------------------------
// Attribute access

fn err(el: &Element, attr: &str, msg: impl Into<String>) -> XmlError {
    XmlError::new(el.line, el.name, Some(attr), msg)
}

fn attr<'a>(el: &'a Element, key: &str) -> Result<&'a str, XmlError> {
    el.attr(key).ok_or_else(|| {
        err(
            el,
            key,
            format!("Attribute {key} of node {} not found", el.name),
        )
    })
}

/// Parses a plain decimal integer; rejects what `strtol(s, NULL, 0)` would read differently.
fn parse_decimal(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let plain = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && s != "-0";
    if plain {
        return s
            .parse::<i64>()
            .map_err(|_| format!("value \"{s}\" is out of range"));
    }
    let lower = digits.to_ascii_lowercase();
    let hint = if let Some(hex) = lower.strip_prefix("0x") {
        i64::from_str_radix(hex, 16)
            .ok()
            .map(|v| format!(" (strtol reads it as hexadecimal {v})"))
    } else if digits.len() > 1 && digits.starts_with('0') {
        i64::from_str_radix(&digits[1..], 8)
            .ok()
            .map(|v| format!(" (strtol reads a leading 0 as octal: {v})"))
    } else {
        None
    };
    Err(format!(
        "value \"{s}\" is not a plain decimal integer{}",
        hint.unwrap_or_default()
    ))
}

fn int(el: &Element, key: &str) -> Result<i64, XmlError> {
    parse_decimal(attr(el, key)?).map_err(|m| err(el, key, m))
}

fn int_in(el: &Element, key: &str, lo: i64, hi: i64) -> Result<i64, XmlError> {
    let v = int(el, key)?;
    if v < lo || v > hi {
        return Err(err(
            el,
            key,
            format!("{key}={v} must be between {lo} and {hi}"),
        ));
    }
    Ok(v)
}

fn flag(el: &Element, key: &str) -> Result<bool, XmlError> {
    Ok(int_in(el, key, 0, 1)? == 1)
}

/// An optional peer attribute: -1 = none.
fn peer(el: &Element, key: &str, rank: usize, ngpus: usize) -> Result<Option<usize>, XmlError> {
    let v = int(el, key)?;
    if v < -1 {
        return Err(err(
            el,
            key,
            format!("{key}={v}: a peer must be -1 or a rank"),
        ));
    }
    if v == rank as i64 {
        return Err(err(el, key, format!("{key}={v} is the GPU's own rank")));
    }
    if v >= ngpus as i64 {
        return Err(err(
            el,
            key,
            format!("{key}={v} is not a rank (ngpus {ngpus})"),
        ));
    }
    Ok(usize::try_from(v).ok())
}

// ---------------------------------------------------------------------------------------
// <algo>

struct Header {
    name: String,
    protocol: Protocol,
    nchannels: usize,
    ngpus: usize,
    inplace: bool,
    outofplace: bool,
    min_bytes: u64,
    max_bytes: u64,
    sem: Semantics,
    /// A custom collective's conditions (from the leading comment).
    custom: Option<crate::ir::CustomCollective>,
}

/// The executor and RCCL: the runtimes that need `outofplace`, `minBytes` and `maxBytes`.
const EXECUTORS: [Flavor; 2] = [Flavor::Nccl, Flavor::Rccl];

/// The legacy runtime's `maxBytes` when the attribute is missing (exclusive): 128 MiB.
pub const LEGACY_DEFAULT_MAX_BYTES: u64 = 1 << 27;

fn read_algo(
    el: &Element,
    custom: Option<crate::ir::CustomCollective>,
    dialect: &mut Dialect,
) -> Result<Header, XmlError> {
    let missing = |key: &str| format!("Attribute {key} of node algo not found");
    // Only the legacy runtime reads `name`.
    let name = match el.attr("name") {
        Some(n) => n.to_string(),
        None => {
            dialect.refuse(&[Flavor::Legacy], el.line, missing("name"));
            String::new()
        }
    };
    let proto = attr(el, "proto")?;
    let protocol = Protocol::from_name(proto).ok_or_else(|| {
        err(
            el,
            "proto",
            format!("MSCCL: protocol {proto} is not supported."),
        )
    })?;
    let nchannels = int_in(el, "nchannels", 1, MAX_CHANNELS)? as usize;
    // Every collective has a buffer of nchunksperloop chunks that offsets (int16) must reach.
    let nchunks = int_in(el, "nchunksperloop", 1, MAX_OFFSET + 1)? as usize;
    let ngpus = int_in(el, "ngpus", 1, MAX_NGPUS as i64)? as usize;
    let coll = attr(el, "coll")?;
    let collective = Collective::from_xml_name(coll)
        .ok_or_else(|| err(el, "coll", format!("MSCCL: unsupported collective: {coll}")))?;
    for flavor in Flavor::ALL {
        if collective.xml_name(flavor) != Some(coll) {
            let why = match flavor {
                Flavor::Legacy => format!("MSCCL: collective type {coll} is not supported."),
                _ => format!("MSCCL: unsupported collective: {coll}"),
            };
            dialect.refuse(&[flavor], el.line, why);
        }
    }
    let inplace = flag(el, "inplace")?;
    // The legacy runtime has no `outofplace`: it selects a file only when `inplace` equals
    // the call's in-placeness.
    let outofplace = match el.attr("outofplace") {
        Some(_) => flag(el, "outofplace")?,
        None => {
            dialect.refuse(&EXECUTORS, el.line, missing("outofplace"));
            dialect.defaulted_to("algo outofplace", u8::from(!inplace), Flavor::Legacy);
            !inplace
        }
    };
    if !inplace && !outofplace {
        return Err(err(
            el,
            "outofplace",
            "inplace and outofplace are both 0: the algorithm is never selected",
        ));
    }
    let min_bytes = match el.attr("minBytes") {
        Some(_) => int_in(el, "minBytes", 0, i64::MAX)? as u64,
        None => {
            dialect.refuse(&EXECUTORS, el.line, missing("minBytes"));
            dialect.defaulted_to("algo minBytes", 0, Flavor::Legacy);
            0
        }
    };
    let max_bytes = match el.attr("maxBytes") {
        Some(_) => int_in(el, "maxBytes", 0, i64::MAX)? as u64,
        None => {
            // Legacy's default bound is exclusive; the program holds the inclusive one.
            dialect.refuse(&EXECUTORS, el.line, missing("maxBytes"));
            dialect.defaulted_to(
                "algo maxBytes",
                format!("{LEGACY_DEFAULT_MAX_BYTES} (exclusive: calls under 128 MiB)"),
                Flavor::Legacy,
            );
            LEGACY_DEFAULT_MAX_BYTES - 1
        }
    };
    if max_bytes != 0 && min_bytes > max_bytes {
        return Err(err(
            el,
            "maxBytes",
            format!("maxBytes {max_bytes} is below minBytes {min_bytes}"),
        ));
    }
    if max_bytes == 0 {
        dialect.refuse(
            &[Flavor::Legacy],
            el.line,
            "maxBytes=\"0\": the legacy runtime never selects it (its range is minBytes <= size < maxBytes)",
        );
    }
    if let Some(v) = el.attr("nthreads") {
        match parse_decimal(v) {
            Ok(n) if n % 32 == 0 => {}
            _ => dialect.refuse(
                &[Flavor::Legacy],
                el.line,
                format!("MSCCL nthreads must be a multiplication of 32 (nthreads=\"{v}\")"),
            ),
        }
    }
    let root = match el.attr("root") {
        Some(_) => int_in(el, "root", 0, ngpus as i64 - 1)? as usize,
        None => 0,
    };
    let sem = match (collective, &custom) {
        (Collective::Custom, Some(c)) => Semantics::custom(c, ngpus, nchunks, false),
        // No conditions: the layout is what the GPUs declare, checked by the legacy rule
        // (every used buffer has nchunksperloop chunks); nothing is required of the output.
        (Collective::Custom, None) => Semantics::custom(
            &crate::ir::CustomCollective {
                input_chunks: nchunks,
                output_chunks: nchunks,
                pre: Vec::new(),
                post: Vec::new(),
            },
            ngpus,
            nchunks,
            false,
        ),
        _ => Semantics::new(collective, ngpus, nchunks, root, false),
    }
    .map_err(|m| err(el, "nchunksperloop", m))?;
    Ok(Header {
        name,
        protocol,
        nchannels,
        ngpus,
        inplace,
        outofplace,
        min_bytes,
        max_bytes,
        sem,
        custom,
    })
}

// ---------------------------------------------------------------------------------------
// <gpu>

fn read_gpu(el: &Element, h: &Header, dialect: &mut Dialect) -> Result<Gpu, XmlError> {
    let rank = int_in(el, "id", 0, h.ngpus as i64 - 1)? as usize;
    let input_chunks = int_in(el, "i_chunks", 0, MAX_OFFSET + 1)? as usize;
    let output_chunks = int_in(el, "o_chunks", 0, MAX_OFFSET + 1)? as usize;
    let s = int(el, "s_chunks")?;
    if s < 0 {
        return Err(err(
            el,
            "s_chunks",
            "MSCCL: nScratchChunks must be not negative.",
        ));
    }
    if s > MAX_OFFSET + 1 {
        return Err(err(
            el,
            "s_chunks",
            format!(
                "s_chunks={s}: offsets (int16) reach at most {} chunks",
                MAX_OFFSET + 1
            ),
        ));
    }
    let scratch_chunks = s as usize;
    let (input_chunks, output_chunks) = check_extents(el, h, input_chunks, output_chunks, dialect);
    let mut gpu = Gpu {
        rank,
        input_chunks,
        output_chunks,
        scratch_chunks,
        threadblocks: Vec::new(),
    };
    let raws = read_threadblocks(el, h, &gpu, dialect)?;
    check_dependencies(&raws, rank)?;
    let maps: Vec<Vec<Option<usize>>> = raws.iter().map(index_map).collect();
    gpu.threadblocks = raws.iter().map(|tb| to_threadblock(tb, &maps)).collect();
    Ok(gpu)
}

/// The legacy runtime's chunk consistency (msccl-ir.md §1.4): a non-zero `i_chunks` times
/// the input multiplier (ngpus for allgather, else 1) and a non-zero `o_chunks` times the
/// output multiplier (ngpus for reduce-scatter, else 1) must equal nchunksperloop. For
/// built-in collectives that is the semantics' extent; a custom collective (multipliers 1,
/// loaded only by the legacy runtime) declares nchunksperloop for every buffer it uses,
/// whatever its conditions' counts. The executor and RCCL do not check this, so a mismatch
/// is a legacy refusal. Returns the extents of the program in memory: a custom collective's
/// from its conditions.
fn check_extents(
    el: &Element,
    h: &Header,
    i: usize,
    o: usize,
    dialect: &mut Dialect,
) -> (usize, usize) {
    let custom = h.sem.collective == Collective::Custom;
    let extent = |b: Buffer| h.sem.extent(b).unwrap_or(0);
    let declared = |b: Buffer| if custom { h.sem.nchunks } else { extent(b) };
    let (full_i, full_o) = (declared(Buffer::Input), declared(Buffer::Output));
    for (key, v, full) in [("i_chunks", i, full_i), ("o_chunks", o, full_o)] {
        if v != 0 && v != full {
            dialect.refuse(&[Flavor::Legacy], el.line, format!(
                "Inconsistency between i_chunks/o_chunks ({i}/{o}) and nchunksperloop ({}) for collective {}: {key} must be 0 or {full}",
                h.sem.nchunks, h.sem.collective
            ));
        }
    }
    // The executor checks offsets against the declared count; the buffer itself has the
    // collective's extent.
    let in_memory = |v: usize, b: Buffer| v.min(extent(b));
    (in_memory(i, Buffer::Input), in_memory(o, Buffer::Output))
}

// ---------------------------------------------------------------------------------------
// <tb> and <step>, as written

struct RawTb<'a> {
    el: &'a Element<'a>,
    send: Option<usize>,
    recv: Option<usize>,
    chan: usize,
    steps: Vec<RawStep<'a>>,
}

struct RawStep<'a> {
    el: &'a Element<'a>,
    op: Op,
    src: (Buffer, i64),
    dst: (Buffer, i64),
    cnt: usize,
    dep: Option<(usize, usize)>,
    hasdep: bool,
}

fn read_threadblocks<'a>(
    gpu_el: &'a Element<'a>,
    h: &Header,
    gpu: &Gpu,
    dialect: &mut Dialect,
) -> Result<Vec<RawTb<'a>>, XmlError> {
    let mut by_id: HashMap<usize, RawTb<'a>> = HashMap::new();
    let mut links: HashMap<(usize, usize, bool), usize> = HashMap::new();
    // Threadblocks with a send (true) or receive peer per (channel, direction).
    let mut peers: HashMap<(usize, bool), usize> = HashMap::new();
    for el in &gpu_el.children {
        expect_name(el, "tb")?;
        let id = int(el, "id")?;
        if id < 0 {
            return Err(err(el, "id", format!("thread block id {id} is negative")));
        }
        if id >= MAX_TBS {
            return Err(err(
                el,
                "id",
                format!("MSCCL: too many thread blocks are requested ({id} >= {MAX_TBS})"),
            ));
        }
        let id = id as usize;
        for flavor in Flavor::ALL {
            let limit = Limits::of(flavor).max_tbs;
            if id >= limit {
                dialect.refuse(&[flavor], el.line, format!(
                    "MSCCL: too many thread blocks are requested (thread block {id} on GPU {}; at most {limit})",
                    gpu.rank
                ));
            }
        }
        let tb = read_tb(el, h, gpu, dialect)?;
        for (p, is_send) in [(tb.send, true), (tb.recv, false)] {
            let Some(p) = p else { continue };
            let on_channel = peers.entry((tb.chan, is_send)).or_insert(0);
            *on_channel += 1;
            if *on_channel > limits::MAX_PEER_TBS_PER_CHANNEL {
                let (key, dir) = if is_send {
                    ("send", "sends")
                } else {
                    ("recv", "recvs")
                };
                return Err(err(el, key, format!(
                    "MSCCL: too many {dir} per channel. Max allowed {} (thread block {id} is number {} with a {key} peer on channel {} of GPU {})",
                    limits::MAX_PEER_TBS_PER_CHANNEL, *on_channel, tb.chan, gpu.rank
                )));
            }
            if let Some(other) = links.insert((tb.chan, p, is_send), id) {
                let (key, dir) = if is_send {
                    ("send", "sends to")
                } else {
                    ("recv", "receives from")
                };
                return Err(err(el, key, format!(
                    "thread block {other} already {dir} rank {p} on channel {}: one tb per (channel, peer, direction)",
                    tb.chan
                )));
            }
        }
        if by_id.insert(id, tb).is_some() {
            return Err(err(el, "id", format!("duplicate thread block id {id}")));
        }
    }
    let n = by_id.len();
    (0..n)
        .map(|id| {
            by_id.remove(&id).ok_or_else(|| {
                XmlError::new(
                    gpu_el.line,
                    "gpu",
                    Some("id"),
                    format!("MSCCL: thread block {id} is missing (GPU {})", gpu.rank),
                )
            })
        })
        .collect()
}

fn read_tb<'a>(
    el: &'a Element<'a>,
    h: &Header,
    gpu: &Gpu,
    dialect: &mut Dialect,
) -> Result<RawTb<'a>, XmlError> {
    let send = peer(el, "send", gpu.rank, h.ngpus)?;
    let recv = peer(el, "recv", gpu.rank, h.ngpus)?;
    let chan = int(el, "chan")?;
    if chan < 0 || chan >= h.nchannels as i64 {
        return Err(err(
            el,
            "chan",
            format!("chan {chan} is not below nchannels {}", h.nchannels),
        ));
    }
    let mut tb = RawTb {
        el,
        send,
        recv,
        chan: chan as usize,
        steps: Vec::new(),
    };
    if el.children.len() > MAX_STEPS {
        return Err(err(
            el,
            "id",
            format!(
                "{} steps exceed the runtimes' limit of {MAX_STEPS}",
                el.children.len()
            ),
        ));
    }
    for flavor in Flavor::ALL {
        let limit = Limits::of(flavor).max_steps;
        if el.children.len() > limit {
            dialect.refuse(&[flavor], el.line, format!(
                "MSCCL: too many steps are requested: thread block {} on GPU {} has {} (at most {limit})",
                el.attr("id").unwrap_or("?"), gpu.rank, el.children.len()
            ));
        }
    }
    for (pos, sel) in el.children.iter().enumerate() {
        expect_name(sel, "step")?;
        let step = read_step(sel, pos, &tb, gpu)?;
        if step.op.is_fused() {
            dialect.refuse(&[Flavor::Rccl], sel.line, format!(
                "MSCCL: this version of MSCCL build doesn't support full Ops (step type {}; RCCL runs only s, r, cpy, re, nop)",
                step.op
            ));
        }
        tb.steps.push(step);
    }
    check_nop_chains(&tb)?;
    check_reduce_chains(&tb)?;
    Ok(tb)
}

fn read_step<'a>(
    el: &'a Element<'a>,
    pos: usize,
    tb: &RawTb,
    gpu: &Gpu,
) -> Result<RawStep<'a>, XmlError> {
    let s = int(el, "s")?;
    if s != pos as i64 {
        return Err(err(el, "s", format!(
            "step s=\"{s}\" is out of order: expected {pos} (the kernel numbers steps by position, counting nops)"
        )));
    }
    let code = attr(el, "type")?;
    let op = Op::from_code(code).ok_or_else(|| {
        err(
            el,
            "type",
            format!("MSCCL: type of transfer is not supported: {code}"),
        )
    })?;
    let src = (buffer(el, "srcbuf")?, int_in(el, "srcoff", -1, MAX_OFFSET)?);
    let dst = (buffer(el, "dstbuf")?, int_in(el, "dstoff", -1, MAX_OFFSET)?);
    let cnt = int(el, "cnt")?;
    let min_cnt = if op == Op::Nop { 0 } else { 1 };
    if cnt < min_cnt || cnt >= MAX_COUNT {
        return Err(err(
            el,
            "cnt",
            format!("count ({cnt}) must be positive and less than {MAX_COUNT}"),
        ));
    }
    let dep = read_dep(el)?;
    let hasdep = int(el, "hasdep")?;
    if hasdep != 0 && hasdep != 1 {
        return Err(err(el, "hasdep", "hasDependence needs to be 0 or 1"));
    }
    let step = RawStep {
        el,
        op,
        src,
        dst,
        cnt: cnt as usize,
        dep,
        hasdep: hasdep == 1,
    };
    check_step_peers(&step, tb, gpu.rank)?;
    if op == Op::Nop && dep.is_none() {
        return Err(err(el, "depid", "nop without a dependency (depid=-1)"));
    }
    check_step_bounds(&step, gpu)?;
    Ok(step)
}

fn buffer(el: &Element, key: &str) -> Result<Buffer, XmlError> {
    let v = attr(el, key)?;
    Buffer::from_letter(v).ok_or_else(|| {
        err(
            el,
            key,
            format!("MSCCL: type of buffer is not supported: {v}"),
        )
    })
}

fn read_dep(el: &Element) -> Result<Option<(usize, usize)>, XmlError> {
    let depid = int_in(el, "depid", -1, MAX_DEPID)?;
    let deps = int_in(el, "deps", -1, MAX_OFFSET)?;
    match (depid, deps) {
        (-1, -1) => Ok(None),
        (-1, _) | (_, -1) => Err(err(
            el,
            "deps",
            format!("depid={depid} and deps={deps}: both must be -1 or both set"),
        )),
        (b, k) => Ok(Some((b as usize, k as usize))),
    }
}

fn check_step_peers(step: &RawStep, tb: &RawTb, rank: usize) -> Result<(), XmlError> {
    let id = tb.el.attr("id").unwrap_or("?");
    if step.op.sends() && tb.send.is_none() {
        return Err(err(
            step.el,
            "type",
            format!("there is a send in thread block {id} on GPU {rank} without a sendPeer."),
        ));
    }
    if step.op.receives() && tb.recv.is_none() {
        return Err(err(
            step.el,
            "type",
            format!("there is a recv in thread block {id} on GPU {rank} without a recvPeer."),
        ));
    }
    Ok(())
}

fn check_step_bounds(step: &RawStep, gpu: &Gpu) -> Result<(), XmlError> {
    let fields = [
        (step.op.reads_src(), step.src, "srcoff"),
        (step.op.writes_dst(), step.dst, "dstoff"),
    ];
    for (used, (buf, off), key) in fields {
        if !used {
            continue;
        }
        let extent = gpu.chunks(buf) as i64;
        let name = match buf {
            Buffer::Input => "input",
            Buffer::Output => "output",
            Buffer::Scratch => "scratch",
        };
        if off < 0 || off >= extent {
            return Err(err(
                step.el,
                key,
                format!(
                "Incorrect offset set for {name} buffer: offset: {off} maximum allowed: {extent}"
            ),
            ));
        }
        if off + step.cnt as i64 > extent {
            return Err(err(
                step.el,
                "cnt",
                format!(
                    "offset {off} + cnt {} exceeds the {extent} chunks of the {name} buffer",
                    step.cnt
                ),
            ));
        }
    }
    Ok(())
}

/// A run of nops must be closed by a real step that has its own dependency.
fn check_nop_chains(tb: &RawTb) -> Result<(), XmlError> {
    const MSG: &str = "when there is a chain of dependencies, the last reduction must be a part of the first immediate instruction";
    let mut open = false;
    for step in &tb.steps {
        if step.op == Op::Nop {
            open = true;
            continue;
        }
        if open && step.dep.is_none() {
            return Err(err(
                step.el,
                "depid",
                format!("{MSG} (nops must be followed by a step with depid >= 0)"),
            ));
        }
        open = false;
    }
    match tb.steps.last() {
        Some(last) if open => Err(err(
            last.el,
            "type",
            format!("{MSG} (the thread block ends with a nop)"),
        )),
        _ => Ok(()),
    }
}

/// True if the runtime fuses `cur` into the `re` chain that ends with `prev`.
fn raw_fuses(prev: &RawStep, cur: &RawStep, chain: usize) -> bool {
    prev.op == Op::Reduce
        && cur.op == Op::Reduce
        && prev.dst == cur.dst
        && prev.src.0 == cur.src.0
        && cur.dep.is_none()
        && !prev.hasdep
        && chain < MAX_REDUCE_FUSION
}

/// A fused `re` chain runs with its last step's cnt, so all must be equal.
fn check_reduce_chains(tb: &RawTb) -> Result<(), XmlError> {
    let mut chain = 1;
    for w in tb.steps.windows(2) {
        if !raw_fuses(&w[0], &w[1], chain) {
            chain = 1;
            continue;
        }
        chain += 1;
        if w[0].cnt != w[1].cnt {
            return Err(err(w[1].el, "cnt", format!(
                "this re fuses with the previous re (cnt {}) but has cnt {}: the runtime uses one cnt for the chain",
                w[0].cnt, w[1].cnt
            )));
        }
    }
    Ok(())
}

fn check_dependencies(tbs: &[RawTb], rank: usize) -> Result<(), XmlError> {
    for (id, tb) in tbs.iter().enumerate() {
        for step in &tb.steps {
            let Some((b, k)) = step.dep else { continue };
            let e = |m: String| Err(err(step.el, "depid", m));
            if b == id {
                return e(format!("depid {b} names its own thread block"));
            }
            let Some(target) = tbs.get(b) else {
                return e(format!("depid {b} is not a thread block of GPU {rank}"));
            };
            let Some(ts) = target.steps.get(k) else {
                return Err(err(
                    step.el,
                    "deps",
                    format!(
                        "deps {k} is beyond the {} steps of thread block {b}",
                        target.steps.len()
                    ),
                ));
            };
            if ts.op == Op::Nop {
                return Err(err(
                    step.el,
                    "deps",
                    format!("deps {k} of thread block {b} is a nop, which never publishes a flag"),
                ));
            }
            if !ts.hasdep {
                return Err(err(step.el, "deps", format!(
                    "depends on thread block {b} step {k} which does not have hasdep=\"1\" (the waiter would hang)"
                )));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Translation

/// In-memory index of each XML step (None for nops).
fn index_map(tb: &RawTb) -> Vec<Option<usize>> {
    let mut next = 0;
    tb.steps
        .iter()
        .map(|s| {
            (s.op != Op::Nop).then(|| {
                next += 1;
                next - 1
            })
        })
        .collect()
}

/// A threadblock as in memory; `maps` holds the [`index_map`] of every threadblock of the GPU.
fn to_threadblock(tb: &RawTb, maps: &[Vec<Option<usize>>]) -> Threadblock {
    let map_dep = |(b, k): (usize, usize)| Dep {
        tb: b,
        step: maps[b][k].expect("checked: not a nop"),
    };
    let mut steps = Vec::with_capacity(tb.steps.len());
    let mut pending: Vec<Dep> = Vec::new();
    for s in &tb.steps {
        if s.op == Op::Nop {
            pending.extend(s.dep.map(map_dep));
            continue;
        }
        let mut deps: Vec<Dep> = s.dep.map(map_dep).into_iter().collect();
        deps.append(&mut pending);
        let slot = |(b, off): (Buffer, i64)| Slot::new(b, off.max(0) as usize);
        steps.push(Step {
            op: s.op,
            src: slot(s.src),
            dst: slot(s.dst),
            count: s.cnt,
            deps,
        });
    }
    Threadblock {
        send: tb.send,
        recv: tb.recv,
        channel: tb.chan,
        steps,
    }
}
