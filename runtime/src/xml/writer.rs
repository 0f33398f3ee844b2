//! The XML writer, following msccl-ir.md §1.1 and §1.13: no declaration, spaces only, one
//! element per line, two-space indent, msccl-tools' attribute order, tb ids 0..n-1, `s`
//! numbered 0..k-1 counting nops, first dependency on the step and the others as nops just
//! before it, `hasdep="1"` exactly on dependency targets, `nchannels` = max chan + 1,
//! send/receive pairs carrying identical src/dst fields, and a custom collective's used
//! buffers declared as nchunksperloop chunks (the legacy runtime's chunk consistency).

use super::{chain_lengths, dependency_targets};
use crate::ir::{Buffer, Collective, Flavor, Gpu, Op, Program, Slot, Step, Threadblock};
use crate::limits::{
    Limits, MAX_COUNT, MAX_DEPID, MAX_NAME, MAX_OFFSET, MAX_PEER_TBS_PER_CHANNEL, MAX_RANK_ELEMENTS,
};
use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::Write as _;

/// `maxBytes` written for the legacy runtime when the program has no upper limit (0) and
/// uses no scratch: the legacy runtime treats 0 as "never selected", so a huge explicit bound
/// (2^62) stands for "no limit". A program's positive `max_bytes` (inclusive, the executor's
/// reading) is written as `max_bytes + 1` because the legacy range is exclusive. See
/// [`legacy_max_bytes`] for programs that use scratch.
pub const LEGACY_UNLIMITED_MAX_BYTES: u64 = 1 << 62;

/// Scratch (bytes per GPU) that a legacy file without an upper size limit may make the
/// runtime allocate beyond what a 1 GiB call needs: microsoft/msccl allocates `maxBytes ×
/// s_chunks / nchunksperloop` bytes of scratch when it loads a file, so 2^62 would ask for
/// about 10^17 bytes.
pub const LEGACY_SCRATCH_BYTES: u64 = 1 << 30;

/// The largest call (bytes) every legacy file without an upper limit serves: nccl-tests'
/// 1 GB.
pub const LEGACY_MIN_COVERED_BYTES: u64 = 1 << 30;

/// The `maxBytes` written for the legacy runtime (exclusive; see
/// [`LEGACY_UNLIMITED_MAX_BYTES`]). A program whose GPUs use scratch (`s` = the most
/// `s_chunks` of any GPU) and has no upper limit gets the larger of `2^30 + 1` (calls up to
/// [`LEGACY_MIN_COVERED_BYTES`] are served) and the size whose scratch is
/// [`LEGACY_SCRATCH_BYTES`], `⌊2^30 × nchunksperloop / s⌋` (at most 2^62): the start-up
/// allocation is then 1 GiB, or what a 1 GiB call needs if that is more, and larger calls
/// run NCCL's own algorithm. An explicit limit is kept, but the runtime's product
/// `maxBytes × s` must fit in an int64 (in-place alltoall with two instances made 2^62 × s
/// wrap to 0). Errors (one line) when the product overflows or the range is empty.
pub fn legacy_max_bytes(p: &Program) -> Result<u64, String> {
    let scratch = p.gpus.iter().map(|g| g.scratch_chunks).max().unwrap_or(0) as u128;
    let written = match p.max_bytes {
        0 if scratch == 0 => LEGACY_UNLIMITED_MAX_BYTES,
        0 => {
            let cap = LEGACY_SCRATCH_BYTES as u128 * p.nchunksperloop as u128 / scratch;
            cap.max(LEGACY_MIN_COVERED_BYTES as u128 + 1)
                .min(LEGACY_UNLIMITED_MAX_BYTES as u128) as u64
        }
        m => m.saturating_add(1),
    };
    if written as u128 * scratch > i64::MAX as u128 {
        return Err(format!(
            "legacy maxBytes {written} × {scratch} scratch chunks overflows the runtime's int64 scratch size (maxBytes × s_chunks / nchunksperloop); give a smaller --max-bytes"
        ));
    }
    if written <= p.min_bytes {
        let why = if scratch > 0 && p.max_bytes == 0 {
            format!(
                "the default limit of a file with {scratch} scratch chunks per {} chunks, whose scratch the runtime allocates at start-up; give --max-bytes",
                p.nchunksperloop
            )
        } else {
            "the legacy range is exclusive".to_string()
        };
        return Err(format!(
            "legacy maxBytes {written} is not above minBytes {} ({why})",
            p.min_bytes
        ));
    }
    Ok(written)
}

/// Why a program cannot be written in a flavour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot write {flavor:?} XML: {problem}")]
pub struct WriteError {
    /// The flavour asked for.
    pub flavor: Flavor,
    /// What prevents it.
    pub problem: WriteProblem,
}

/// What keeps a program from being written: the limits a lowering may work around get a
/// variant each, every other rule of the format is [`WriteProblem::Invalid`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteProblem {
    /// A rank has more threadblocks than the flavour runs.
    #[error("rank {rank} has {count} threadblocks (limit {limit})")]
    TooManyThreadblocks {
        /// The rank.
        rank: usize,
        /// Its threadblocks.
        count: usize,
        /// The flavour's limit.
        limit: usize,
    },
    /// A threadblock has more steps, nops included, than the flavour runs.
    #[error("rank {rank} tb {tb}: {steps} steps including nops (limit {limit})")]
    TooManySteps {
        /// The rank.
        rank: usize,
        /// The threadblock.
        tb: usize,
        /// Its steps as written, nops included.
        steps: usize,
        /// The flavour's limit.
        limit: usize,
    },
    /// A rank has more threadblocks with a send peer (or with a receive peer) on one
    /// channel than the runtimes take ("too many sends/recvs per channel").
    #[error("rank {rank} channel {channel}: {count} threadblocks with a {} peer (limit {limit} per channel)", if *send { "send" } else { "receive" })]
    TooManyChannelPeers {
        /// The rank.
        rank: usize,
        /// The channel.
        channel: usize,
        /// Whether the threadblocks counted have a send peer (else a receive peer).
        send: bool,
        /// Those threadblocks.
        count: usize,
        /// The runtimes' limit.
        limit: usize,
    },
    /// A rank's part of the file has more XML elements than the runtimes' parser holds.
    #[error("rank {rank}: {elements} XML elements to load (algo, gpus, its tbs and steps; the parser holds {limit})")]
    TooManyElements {
        /// The rank.
        rank: usize,
        /// The elements the parser would hold for it.
        elements: usize,
        /// The parser's limit.
        limit: usize,
    },
    /// A dependency names a threadblock whose id does not fit the runtime's int8 `depid`.
    #[error("rank {rank} tb {tb} step {step}: depid {depid} does not fit the runtime's int8")]
    DepidTooLarge {
        /// The rank.
        rank: usize,
        /// The threadblock of the waiting step.
        tb: usize,
        /// The waiting step.
        step: usize,
        /// The threadblock waited for.
        depid: usize,
    },
    /// The name is too long or holds characters the format cannot carry.
    #[error("name {name:?} must be at most {MAX_NAME} characters without quotes, <, >, & or control characters")]
    BadName {
        /// The program's name.
        name: String,
    },
    /// The stream refused the text.
    #[error("cannot write: {0}")]
    Io(String),
    /// The program computes ([`Op::Compute`]): the MSCCL runtimes run copies and reductions
    /// only, so it has no XML form.
    #[error("the program has {steps} compute step(s): the MSCCL runtimes run copies and reductions only, so it has no XML form; a runtime would need an elementwise compute instruction carrying its expression, scalars, state buffers and dropout seed (synth's IR JSON holds it)")]
    Compute {
        /// Its compute steps.
        steps: usize,
    },
    /// Any other rule of the format or the flavour, in one line.
    #[error("{0}")]
    Invalid(String),
}

/// Writes a program as MSCCL XML in a flavour. Nops in the program are folded first.
pub fn write(program: &Program, flavor: Flavor) -> Result<String, WriteError> {
    let mut out = Vec::new();
    write_to(program, flavor, &mut out)?;
    Ok(String::from_utf8(out).expect("the writer writes ASCII and checked names"))
}

/// Checks that a program can be written in a flavour (the format-level checks of
/// [`write`], without writing anything): lowering uses it to find the split that fits.
pub fn writable(program: &Program, flavor: Flavor) -> Result<(), WriteError> {
    let fail = |problem: WriteProblem| WriteError { flavor, problem };
    let invalid = |message: String| fail(WriteProblem::Invalid(message));
    let p = folded(program).map_err(invalid)?;
    check(&p, flavor).map_err(fail)?;
    if flavor == Flavor::Legacy {
        legacy_max_bytes(&p).map_err(invalid)?;
    }
    p.collective
        .xml_name(flavor)
        .ok_or_else(|| invalid(format!("the runtime has no {}", p.collective)))?;
    Ok(())
}

/// [`write`] to a stream, a line at a time: a 1024-rank program's XML (hundreds of
/// megabytes) goes to its file without being held in memory. Nothing is written when the
/// program cannot be expressed; an I/O failure is a [`WriteError`] naming it.
pub fn write_to(
    program: &Program,
    flavor: Flavor,
    out: &mut dyn std::io::Write,
) -> Result<(), WriteError> {
    let fail = |problem: WriteProblem| WriteError { flavor, problem };
    let invalid = |message: String| fail(WriteProblem::Invalid(message));
    let p = folded(program).map_err(invalid)?;
    check(&p, flavor).map_err(fail)?;
    let max_bytes = match flavor {
        Flavor::Legacy => legacy_max_bytes(&p).map_err(invalid)?,
        _ => p.max_bytes,
    };
    let coll = p
        .collective
        .xml_name(flavor)
        .ok_or_else(|| invalid(format!("the runtime has no {}", p.collective)))?;
    let mut buf = Vec::with_capacity(FLUSH_BYTES + 4096);
    let mut flush = |buf: &mut Vec<u8>, force: bool| -> Result<(), WriteError> {
        if force || buf.len() >= FLUSH_BYTES {
            out.write_all(buf)
                .map_err(|e| fail(WriteProblem::Io(e.to_string())))?;
            buf.clear();
        }
        Ok(())
    };
    if p.collective == Collective::Custom {
        let custom = p.custom.as_ref().ok_or_else(|| {
            invalid("a custom collective needs its pre- and postcondition (Program::custom)".into())
        })?;
        // The runtimes skip comments; synth's reader takes the conditions from this one.
        let line = format!(
            "<!-- {} {} -->\n",
            super::reader::CUSTOM_COMMENT,
            custom.to_json_line()
        );
        buf.extend_from_slice(line.as_bytes());
    }
    buf.extend_from_slice(algo_line(&p, coll, max_bytes).as_bytes());
    let ends = ConnectionEnds::of(&p);
    for g in &p.gpus {
        let (i_chunks, o_chunks) = declared_chunks(&p, g);
        buf.extend_from_slice(
            format!(
                "  <gpu id=\"{}\" i_chunks=\"{i_chunks}\" o_chunks=\"{o_chunks}\" s_chunks=\"{}\">\n",
                g.rank, g.scratch_chunks
            )
            .as_bytes(),
        );
        let targets = dependency_targets(&p, g.rank);
        let numbering: Vec<Vec<usize>> = g.threadblocks.iter().map(xml_numbers).collect();
        for (tbi, tb) in g.threadblocks.iter().enumerate() {
            let fields = ends.transfer_fields(&p, g.rank, tb);
            write_tb(&mut buf, tbi, tb, &fields, &targets, &numbering);
            flush(&mut buf, false)?;
        }
        buf.extend_from_slice(b"  </gpu>\n");
    }
    buf.extend_from_slice(b"</algo>\n");
    flush(&mut buf, true)
}

/// Bytes gathered before they go to the stream.
const FLUSH_BYTES: usize = 1 << 16;

/// The `i_chunks` and `o_chunks` written for a GPU. The legacy runtime, the only one that
/// loads `coll="custom"`, requires each to be 0 or nchunksperloop for a custom collective
/// (its buffer multipliers are 1: "Inconsistency between i_chunks/o_chunks ... and
/// nchunksperloop"), so a custom collective's used buffers are declared that large; the
/// conditions comment keeps their real sizes. Other collectives' extents already satisfy it.
fn declared_chunks(p: &Program, g: &Gpu) -> (usize, usize) {
    if p.collective != Collective::Custom {
        return (g.input_chunks, g.output_chunks);
    }
    let declared = |chunks: usize| if chunks == 0 { 0 } else { p.nchunksperloop };
    (declared(g.input_chunks), declared(g.output_chunks))
}

/// The program with its nops folded (a copy only when it has nops).
fn folded(program: &Program) -> Result<Cow<'_, Program>, String> {
    if program.steps().any(|(_, s)| s.op == Op::Nop) {
        let mut p = program.clone();
        p.fold_nops()?;
        Ok(Cow::Owned(p))
    } else {
        Ok(Cow::Borrowed(program))
    }
}

/// The sending and the receiving threadblock of every connection, to write each `s`/`r`
/// pair with identical fields (msccl-tools' convention, [`Program::normalize_transfer_fields`])
/// without copying the program.
struct ConnectionEnds {
    /// (rank, peer, channel) → the rank's first threadblock sending to peer on channel.
    senders: FxHashMap<(usize, usize, usize), usize>,
    /// (rank, peer, channel) → the rank's first threadblock receiving from peer on channel.
    receivers: FxHashMap<(usize, usize, usize), usize>,
}

impl ConnectionEnds {
    fn of(p: &Program) -> ConnectionEnds {
        let (mut senders, mut receivers) = (FxHashMap::default(), FxHashMap::default());
        for (rank, tbi, tb) in p.threadblocks() {
            if let Some(peer) = tb.send {
                senders.entry((rank, peer, tb.channel)).or_insert(tbi);
            }
            if let Some(peer) = tb.recv {
                receivers.entry((rank, peer, tb.channel)).or_insert(tbi);
            }
        }
        ConnectionEnds { senders, receivers }
    }

    /// For each step of `tb` on `rank`, the (src, dst) to write: a `s` takes the `dst` of
    /// the `r` it pairs with (the k-th send with the k-th receive of the connection), a `r`
    /// the `src` of its `s`; other steps keep their own.
    fn transfer_fields(&self, p: &Program, rank: usize, tb: &Threadblock) -> Vec<(Slot, Slot)> {
        let mut fields: Vec<(Slot, Slot)> = tb.steps.iter().map(|s| (s.src, s.dst)).collect();
        let other = |map: &FxHashMap<(usize, usize, usize), usize>, peer: usize| {
            map.get(&(peer, rank, tb.channel))
                .map(|&t| &p.gpus[peer].threadblocks[t].steps)
        };
        if let Some(recvs) = tb.send.and_then(|peer| other(&self.receivers, peer)) {
            let mine = tb.steps.iter().enumerate().filter(|(_, s)| s.op.sends());
            for ((i, s), r) in mine.zip(recvs.iter().filter(|s| s.op.receives())) {
                if s.op == Op::Send && r.op == Op::Recv {
                    fields[i].1 = r.dst;
                }
            }
        }
        if let Some(sends) = tb.recv.and_then(|peer| other(&self.senders, peer)) {
            let mine = tb.steps.iter().enumerate().filter(|(_, s)| s.op.receives());
            for ((i, r), s) in mine.zip(sends.iter().filter(|s| s.op.sends())) {
                if s.op == Op::Send && r.op == Op::Recv {
                    fields[i].0 = s.src;
                }
            }
        }
        fields
    }
}

/// The `<algo …>` line, with `maxBytes` as the flavour writes it.
fn algo_line(p: &Program, coll: &str, max_bytes: u64) -> String {
    let mut out = format!(
        "<algo name=\"{}\" proto=\"{}\" nchannels=\"{}\" nchunksperloop=\"{}\" ngpus=\"{}\" coll=\"{coll}\" inplace=\"{}\" outofplace=\"{}\" minBytes=\"{}\" maxBytes=\"{max_bytes}\"",
        p.name,
        p.protocol.name(),
        p.nchannels(),
        p.nchunksperloop,
        p.ngpus,
        u8::from(p.inplace),
        u8::from(p.outofplace),
        p.min_bytes,
    );
    if p.collective.is_rooted() {
        let _ = write!(out, " root=\"{}\"", p.root);
    }
    out.push_str(">\n");
    out
}

/// XML `s` number of each in-memory step: extra dependencies become nops before it.
fn xml_numbers(tb: &Threadblock) -> Vec<usize> {
    let mut s = 0;
    tb.steps
        .iter()
        .map(|step| {
            s += step.deps.len().saturating_sub(1);
            s += 1;
            s - 1
        })
        .collect()
}

fn write_tb(
    out: &mut Vec<u8>,
    tbi: usize,
    tb: &Threadblock,
    fields: &[(Slot, Slot)],
    targets: &[Vec<bool>],
    numbering: &[Vec<usize>],
) {
    let peer = |p: Option<usize>| p.map_or(-1, |p| p as i64);
    out.extend_from_slice(b"    <tb id=\"");
    number(out, tbi as i64);
    out.extend_from_slice(b"\" send=\"");
    number(out, peer(tb.send));
    out.extend_from_slice(b"\" recv=\"");
    number(out, peer(tb.recv));
    out.extend_from_slice(b"\" chan=\"");
    number(out, tb.channel as i64);
    out.extend_from_slice(b"\">\n");
    let mut s = 0;
    for (si, step) in tb.steps.iter().enumerate() {
        let dep = |i: usize| {
            let d = step.deps[i];
            (d.tb as i64, numbering[d.tb][d.step] as i64)
        };
        for i in 1..step.deps.len() {
            let nop = Line {
                s,
                code: "nop",
                src: (Buffer::Input, -1),
                dst: (Buffer::Output, -1),
                count: 0,
                dep: dep(i),
                hasdep: false,
            };
            nop.write(out);
            s += 1;
        }
        let (src, dst) = fields[si];
        let line = Line {
            s,
            code: step.op.code(),
            src: (src.buffer, src.offset as i64),
            dst: (dst.buffer, dst.offset as i64),
            count: step.count,
            dep: if step.deps.is_empty() {
                (-1, -1)
            } else {
                dep(0)
            },
            hasdep: targets[tbi][si],
        };
        line.write(out);
        s += 1;
    }
    out.extend_from_slice(b"    </tb>\n");
}

/// One `<step>` line.
struct Line {
    s: usize,
    code: &'static str,
    src: (Buffer, i64),
    dst: (Buffer, i64),
    count: usize,
    dep: (i64, i64),
    hasdep: bool,
}

impl Line {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"      <step s=\"");
        number(out, self.s as i64);
        out.extend_from_slice(b"\" type=\"");
        out.extend_from_slice(self.code.as_bytes());
        out.extend_from_slice(b"\" srcbuf=\"");
        out.extend_from_slice(self.src.0.letter().as_bytes());
        out.extend_from_slice(b"\" srcoff=\"");
        number(out, self.src.1);
        out.extend_from_slice(b"\" dstbuf=\"");
        out.extend_from_slice(self.dst.0.letter().as_bytes());
        out.extend_from_slice(b"\" dstoff=\"");
        number(out, self.dst.1);
        out.extend_from_slice(b"\" cnt=\"");
        number(out, self.count as i64);
        out.extend_from_slice(b"\" depid=\"");
        number(out, self.dep.0);
        out.extend_from_slice(b"\" deps=\"");
        number(out, self.dep.1);
        out.extend_from_slice(if self.hasdep {
            b"\" hasdep=\"1\"/>\n"
        } else {
            b"\" hasdep=\"0\"/>\n"
        });
    }
}

/// Appends a decimal integer.
fn number(out: &mut Vec<u8>, x: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(x).as_bytes());
}

// ---------------------------------------------------------------------------------------
// Format-level checks (the verifier covers semantics)

fn check(p: &Program, flavor: Flavor) -> Result<(), WriteProblem> {
    let steps = p.steps().filter(|(_, s)| s.op == Op::Compute).count();
    if steps > 0 || p.compute.is_some() {
        return Err(WriteProblem::Compute { steps });
    }
    let lim = Limits::of(flavor);
    check_header(p, flavor)?;
    for g in &p.gpus {
        if g.threadblocks.len() > lim.max_tbs {
            return Err(WriteProblem::TooManyThreadblocks {
                rank: g.rank,
                count: g.threadblocks.len(),
                limit: lim.max_tbs,
            });
        }
        let mut links = HashSet::new();
        let targets = dependency_targets(p, g.rank);
        for (tbi, tb) in g.threadblocks.iter().enumerate() {
            let at = format!("rank {} tb {tbi}", g.rank);
            check_tb(p, tb, &lim, (g.rank, tbi), &at)?;
            for (peer, dir) in [(tb.send, "send"), (tb.recv, "recv")] {
                if let Some(peer) = peer {
                    if !links.insert((tb.channel, peer, dir)) {
                        return Err(WriteProblem::Invalid(format!(
                            "{at}: a second tb with {dir} peer {peer} on channel {}",
                            tb.channel
                        )));
                    }
                }
            }
            check_reduce_chains(tb, |j| targets[tbi][j], &at).map_err(WriteProblem::Invalid)?;
            for (si, step) in tb.steps.iter().enumerate() {
                check_step(p, g.rank, tbi, step, &lim).map_err(|e| match e {
                    StepFault::Depid(depid) => WriteProblem::DepidTooLarge {
                        rank: g.rank,
                        tb: tbi,
                        step: si,
                        depid,
                    },
                    StepFault::Rule(e) => WriteProblem::Invalid(format!("{at} step {si}: {e}")),
                })?;
            }
        }
        check_rank_size(p, g)?;
    }
    Ok(())
}

/// The limits every runtime puts on one rank's part of the file: threadblocks with a peer
/// per channel and direction, and XML elements held by the parser (msccl-ir.md §1.1, §1.5).
fn check_rank_size(p: &Program, g: &Gpu) -> Result<(), WriteProblem> {
    let mut per_channel: FxHashMap<(usize, bool), usize> = FxHashMap::default();
    for tb in &g.threadblocks {
        for (peer, send) in [(tb.send, true), (tb.recv, false)] {
            if peer.is_some() {
                *per_channel.entry((tb.channel, send)).or_insert(0) += 1;
            }
        }
    }
    let busiest = per_channel
        .into_iter()
        .max_by_key(|&((c, s), n)| (n, std::cmp::Reverse((c, s))));
    if let Some(((channel, send), count)) = busiest.filter(|&(_, n)| n > MAX_PEER_TBS_PER_CHANNEL) {
        return Err(WriteProblem::TooManyChannelPeers {
            rank: g.rank,
            channel,
            send,
            count,
            limit: MAX_PEER_TBS_PER_CHANNEL,
        });
    }
    let steps: usize = g.threadblocks.iter().map(xml_step_count).sum();
    let elements = 1 + p.ngpus + g.threadblocks.len() + steps;
    if elements > MAX_RANK_ELEMENTS {
        return Err(WriteProblem::TooManyElements {
            rank: g.rank,
            elements,
            limit: MAX_RANK_ELEMENTS,
        });
    }
    Ok(())
}

/// The `<step>` elements a threadblock is written as: one per step, plus a nop per extra
/// dependency.
fn xml_step_count(tb: &Threadblock) -> usize {
    tb.steps.iter().map(|s| s.deps.len().max(1)).sum()
}

fn check_header(p: &Program, flavor: Flavor) -> Result<(), WriteProblem> {
    let invalid = |message: &str| Err(WriteProblem::Invalid(message.to_string()));
    if p.gpus.len() != p.ngpus || p.gpus.iter().enumerate().any(|(i, g)| g.rank != i) {
        return invalid("gpus must hold one entry per rank, in rank order");
    }
    if p.nchunksperloop == 0 {
        return invalid("nchunksperloop must be positive");
    }
    if p.name.len() > MAX_NAME || !p.name.chars().all(crate::limits::name_char) {
        return Err(WriteProblem::BadName {
            name: p.name.clone(),
        });
    }
    if !p.inplace && !p.outofplace {
        return invalid("neither inplace nor outofplace is set");
    }
    if p.max_bytes != 0 && p.min_bytes > p.max_bytes {
        return invalid(&format!(
            "min_bytes {} exceeds max_bytes {}",
            p.min_bytes, p.max_bytes
        ));
    }
    if p.max_bytes > i64::MAX as u64 || p.min_bytes > i64::MAX as u64 {
        return invalid("byte range must fit in int64");
    }
    if flavor == Flavor::Legacy && matches!(p.collective, Collective::Gather | Collective::Scatter)
    {
        return invalid(&format!("the legacy runtime has no {}", p.collective));
    }
    Ok(())
}

fn check_tb(
    p: &Program,
    tb: &Threadblock,
    lim: &Limits,
    (rank, tbi): (usize, usize),
    at: &str,
) -> Result<(), WriteProblem> {
    if tb.channel >= lim.max_channels {
        return Err(WriteProblem::Invalid(format!(
            "{at}: channel {} is not below {}",
            tb.channel, lim.max_channels
        )));
    }
    let xml_steps = xml_step_count(tb);
    if xml_steps > lim.max_steps {
        return Err(WriteProblem::TooManySteps {
            rank,
            tb: tbi,
            steps: xml_steps,
            limit: lim.max_steps,
        });
    }
    for peer in [tb.send, tb.recv].into_iter().flatten() {
        if peer >= p.ngpus {
            return Err(WriteProblem::Invalid(format!(
                "{at}: peer {peer} is not a rank"
            )));
        }
    }
    Ok(())
}

fn check_reduce_chains(
    tb: &Threadblock,
    targeted: impl Fn(usize) -> bool,
    at: &str,
) -> Result<(), String> {
    let lens = chain_lengths(&tb.steps, targeted);
    for (i, len) in lens.iter().enumerate().skip(1) {
        if *len > 1 && tb.steps[i].count != tb.steps[i - 1].count {
            return Err(format!(
                "{at} step {i}: re fuses with the previous re but their counts differ ({} vs {})",
                tb.steps[i - 1].count,
                tb.steps[i].count
            ));
        }
    }
    Ok(())
}

/// Why a step breaks its flavour's rules, without its position (see [`check_step`]).
enum StepFault {
    /// A dependency on this threadblock id does not fit the runtime's int8 `depid`.
    Depid(usize),
    /// Another rule, in one line.
    Rule(String),
}

/// The step-level rules of a flavour; the error lacks the step's position (the caller
/// adds it: formatting it for every step would cost more than the checks).
fn check_step(
    p: &Program,
    rank: usize,
    tbi: usize,
    step: &Step,
    lim: &Limits,
) -> Result<(), StepFault> {
    let rule = |message: String| Err(StepFault::Rule(message));
    if !lim.fused_ops && step.op.is_fused() {
        return rule(format!(
            "fused op {} is refused by RCCL's MSCCL kernels (only s, r, cpy, re, nop run); lower without fusion",
            step.op
        ));
    }
    if step.op == Op::Nop {
        return rule("nop left after folding".into());
    }
    if step.count == 0 || step.count > MAX_COUNT {
        return rule(format!(
            "count {} must be between 1 and {MAX_COUNT}",
            step.count
        ));
    }
    if step.src.offset > MAX_OFFSET || step.dst.offset > MAX_OFFSET {
        return rule(format!("offsets must be at most {MAX_OFFSET}"));
    }
    let tbs = &p.gpus[rank].threadblocks;
    for d in &step.deps {
        if d.tb == tbi || d.tb >= tbs.len() || d.step >= tbs[d.tb].steps.len() {
            return rule(format!("invalid dependency on tb {} step {}", d.tb, d.step));
        }
        if d.tb > MAX_DEPID {
            return Err(StepFault::Depid(d.tb));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::{ring_allgather, ring_reduce_scatter};

    /// The `maxBytes` attribute of a written file.
    fn written_max(text: &str) -> u64 {
        let at = text.find("maxBytes=\"").expect("maxBytes") + "maxBytes=\"".len();
        text[at..].split('"').next().unwrap().parse().unwrap()
    }

    #[test]
    fn legacy_max_bytes_without_scratch_is_unlimited() {
        let p = ring_allgather(&[0, 1, 2, 3], 2, false);
        assert!(p.gpus.iter().all(|g| g.scratch_chunks == 0));
        let text = write(&p, Flavor::Legacy).unwrap();
        assert_eq!(written_max(&text), LEGACY_UNLIMITED_MAX_BYTES);
        // The executor's 0 (no limit) stays 0.
        assert_eq!(written_max(&write(&p, Flavor::Nccl).unwrap()), 0);
    }

    #[test]
    fn legacy_max_bytes_with_scratch_bounds_the_start_up_allocation() {
        // 4 ranks, 2 channels: 8 chunks per loop, 2 scratch chunks per GPU.
        let mut p = ring_reduce_scatter(&[0, 1, 2, 3], 2, false);
        assert_eq!((p.nchunksperloop, p.gpus[0].scratch_chunks), (8, 2));
        let max = written_max(&write(&p, Flavor::Legacy).unwrap());
        // 1 GiB of scratch: maxBytes × 2 / 8 = 2^30.
        assert_eq!(max, 4 << 30);
        assert_eq!(max * 2 / 8, LEGACY_SCRATCH_BYTES);
        // An explicit (inclusive) limit is written exclusive, scratch or not.
        p.max_bytes = 1 << 20;
        assert_eq!(
            written_max(&write(&p, Flavor::Legacy).unwrap()),
            (1 << 20) + 1
        );
        // One whose scratch product would wrap the runtime's int64 is refused in one line.
        p.max_bytes = 1 << 62;
        let e = write(&p, Flavor::Legacy).unwrap_err().to_string();
        assert!(e.contains("overflows") && !e.contains('\n'), "{e}");
        // A range that starts above the default limit needs an explicit one.
        p.max_bytes = 0;
        p.min_bytes = 8 << 30;
        let e = write(&p, Flavor::Legacy).unwrap_err().to_string();
        assert!(
            e.contains("not above minBytes") && e.contains("--max-bytes"),
            "{e}"
        );
        // The executor flavours are unaffected.
        assert_eq!(written_max(&write(&p, Flavor::Nccl).unwrap()), 0);
    }

    #[test]
    fn legacy_max_bytes_serves_1_gib_calls_when_scratch_is_large() {
        // 28 scratch chunks per 16: 1 GiB of scratch is a 613 MiB call, less than 1 GiB.
        let mut p = ring_reduce_scatter(&[0, 1, 2, 3], 4, false);
        assert_eq!(p.nchunksperloop, 16);
        p.gpus[1].scratch_chunks = 28;
        assert_eq!(legacy_max_bytes(&p).unwrap(), (1 << 30) + 1);
    }

    #[test]
    fn legacy_max_bytes_never_wraps_with_many_scratch_chunks() {
        // As with in-place alltoall and two instances: 2^62 × 4 scratch chunks is 2^64,
        // which wraps to 0 in 64 bits; the written limit keeps the product in an int64.
        for scratch in [1usize, 4, 64, 1 << 20] {
            let mut p = ring_reduce_scatter(&[0, 1, 2, 3], 2, false);
            for g in &mut p.gpus {
                g.scratch_chunks = scratch;
            }
            let max = legacy_max_bytes(&p).unwrap();
            let product = max as u128 * scratch as u128;
            assert!(product <= i64::MAX as u128, "{scratch}: {max}");
            // 1 GiB of scratch, or what a 1 GiB call needs.
            let one_gib_call = ((1u128 << 30) + 1) * scratch as u128;
            let budget = LEGACY_SCRATCH_BYTES as u128 * p.nchunksperloop as u128;
            assert!(product <= budget.max(one_gib_call));
            assert!(max > 1 << 30);
        }
    }
}
