//! The way back: a synthesized algorithm written as an MSCCLang program, so a user can start
//! from the optimum and hand-tune it. The algorithm is lowered as usual (out of place, one
//! instance); its steps are then listed in an order that the program can execute (a send
//! and its receive together, as a DSL copy is), with the lowered threadblocks and channels
//! pinned, so `synth compile` gives back the same program.

use crate::algorithm::Algorithm;
use crate::lower::{lower, LowerOptions};
use anyhow::{bail, Context, Result};
use runtime::ir::{self, Buffer, Op, Program, StepRef, Threadblock};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

fn buffer(b: Buffer) -> &'static str {
    match b {
        Buffer::Input => "Buffer.input",
        Buffer::Output => "Buffer.output",
        Buffer::Scratch => "\"scratch\"",
    }
}

/// The MSCCLang class and `chunk_factor` of a program's collective.
fn collective(p: &Program) -> Result<(&'static str, usize)> {
    let n = p.ngpus;
    Ok(match p.collective {
        ir::Collective::AllReduce => ("AllReduce", p.nchunksperloop),
        ir::Collective::Broadcast => ("Broadcast", p.nchunksperloop),
        ir::Collective::AllGather => ("AllGather", p.nchunksperloop / n),
        ir::Collective::ReduceScatter => ("ReduceScatter", p.nchunksperloop / n),
        ir::Collective::AllToAll => ("AllToAll", p.nchunksperloop / n),
        other => bail!("the DSL has no {other} collective"),
    })
}

/// The Python expression of a synth topology.
fn topology(spec: &str, ranks: usize) -> (String, &'static str) {
    if spec == "dgx1" {
        return ("dgx1()".into(), "dgx1");
    }
    if spec == format!("fully-connected:{ranks}") {
        return (format!("fully_connected({ranks})"), "fully_connected");
    }
    (format!("named({spec:?}, {ranks})"), "named")
}

/// The program's operations as DSL lines, in an executable order.
fn operations(p: &Program) -> Result<Vec<String>> {
    let mut lister = Lister::new(p);
    let total = p.step_count();
    while lister.done < total {
        let before = lister.done;
        for g in &p.gpus {
            for (tb, block) in g.threadblocks.iter().enumerate() {
                lister.list_next(g.rank, tb, block)?;
            }
        }
        if lister.done == before {
            bail!("the lowered program cannot be listed as a sequence of chunk operations");
        }
    }
    Ok(lister.lines)
}

/// The DSL expression of `count` chunks at `offset` of buffer `b` on `rank`.
fn chunk_expr(rank: usize, b: Buffer, offset: usize, count: usize) -> String {
    format!("chunk({rank}, {}, {offset}, size={count})", buffer(b))
}

/// Lists a program's steps as DSL lines by running its threadblocks: a step is listed once
/// its dependencies are, a send together with its receive.
struct Lister<'p> {
    /// The program.
    p: &'p Program,
    /// The receive of each send.
    partner: HashMap<StepRef, StepRef>,
    /// Every receive (listed with its send, never on its own).
    receiving: HashSet<StepRef>,
    /// The next step of each threadblock, per rank.
    pc: Vec<Vec<usize>>,
    /// The lines so far.
    lines: Vec<String>,
    /// The steps listed so far.
    done: usize,
}

impl<'p> Lister<'p> {
    /// Starts at the first step of every threadblock of `p`.
    fn new(p: &'p Program) -> Lister<'p> {
        let partner: HashMap<StepRef, StepRef> = p.transfer_pairs().into_iter().collect();
        let receiving: HashSet<StepRef> = partner.values().copied().collect();
        let pc = p
            .gpus
            .iter()
            .map(|g| vec![0; g.threadblocks.len()])
            .collect();
        Lister {
            p,
            partner,
            receiving,
            pc,
            lines: Vec::with_capacity(p.step_count()),
            done: 0,
        }
    }

    /// Whether step `at` is its threadblock's next and its dependencies are listed.
    fn ready(&self, at: StepRef) -> bool {
        self.pc[at.rank][at.tb] == at.step
            && self
                .p
                .step(at)
                .is_some_and(|s| s.deps.iter().all(|d| self.pc[at.rank][d.tb] > d.step))
    }

    /// Lists the next step of threadblock `tb` of `rank` (with its receive, for a send) if
    /// it is ready; a step the DSL cannot write is an error.
    fn list_next(&mut self, rank: usize, tb: usize, block: &Threadblock) -> Result<()> {
        let at = StepRef {
            rank,
            tb,
            step: self.pc[rank][tb],
        };
        let Some(s) = block.steps.get(at.step) else {
            return Ok(());
        };
        if self.receiving.contains(&at) || !self.ready(at) {
            return Ok(());
        }
        let pin = format!("sendtb={tb}, ch={}", block.channel);
        let here = |b: Buffer, off: usize| chunk_expr(rank, b, off, s.count);
        match s.op {
            Op::Copy => self.lines.push(format!(
                "{}.copy({}, {}, {}, {pin})",
                here(s.src.buffer, s.src.offset),
                rank,
                buffer(s.dst.buffer),
                s.dst.offset
            )),
            Op::Reduce => self.lines.push(format!(
                "{}.reduce({}, {pin})",
                here(s.dst.buffer, s.dst.offset),
                here(s.src.buffer, s.src.offset)
            )),
            Op::Send => {
                let r = self
                    .partner
                    .get(&at)
                    .copied()
                    .context("a send without a receive")?;
                if !self.ready(r) {
                    return Ok(());
                }
                let from = here(s.src.buffer, s.src.offset);
                self.list_transfer(&from, tb, r, block.channel)?;
            }
            other => bail!("cannot write {other} as a DSL operation"),
        }
        self.pc[rank][tb] += 1;
        self.done += 1;
        Ok(())
    }

    /// Lists a send of the chunk `from` by threadblock `tb` on `channel` together with its
    /// receive `r`: a copy, or (for a receive-reduce-copy) a reduce into the destination,
    /// after a local copy of the receive's source when it is not the destination.
    fn list_transfer(&mut self, from: &str, tb: usize, r: StepRef, channel: usize) -> Result<()> {
        let rs = self.p.step(r).context("a receive step")?;
        let pins = format!("sendtb={tb}, recvtb={}, ch={channel}", r.tb);
        match rs.op {
            Op::Recv => self.lines.push(format!(
                "{from}.copy({}, {}, {}, {pins})",
                r.rank,
                buffer(rs.dst.buffer),
                rs.dst.offset
            )),
            Op::RecvReduceCopy => {
                let acc = chunk_expr(r.rank, rs.dst.buffer, rs.dst.offset, rs.count);
                if rs.src != rs.dst {
                    let source = chunk_expr(r.rank, rs.src.buffer, rs.src.offset, rs.count);
                    self.lines.push(format!(
                        "{source}.copy({}, {}, {}, sendtb={}, ch={channel})",
                        r.rank,
                        buffer(rs.dst.buffer),
                        rs.dst.offset,
                        r.tb
                    ));
                }
                self.lines.push(format!("{acc}.reduce({from}, {pins})"));
            }
            other => bail!("cannot write {other} as a DSL operation"),
        }
        self.pc[r.rank][r.tb] += 1;
        self.done += 1;
        Ok(())
    }
}

/// An algorithm as the text of an MSCCLang program for the topology `spec`.
pub fn program_text(algorithm: &Algorithm, spec: &str) -> Result<String> {
    let p = lower(algorithm, &LowerOptions::default())?;
    let (class, factor) = collective(&p)?;
    let (topo, import) = topology(spec, p.ngpus);
    let root = if p.collective == ir::Collective::Broadcast {
        format!(", root={}", p.root)
    } else {
        String::new()
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {}: {} on {spec} synthesized by synth ({} steps, {} rounds, {} chunks per rank).",
        algorithm.name,
        class,
        algorithm.num_steps(),
        algorithm.rounds(),
        algorithm.chunks()
    );
    let _ = writeln!(
        out,
        "# Threadblocks, channels and their order (instr_order=\"program\") are as synth lowered\n# them; edit freely (drop instr_order to let the compiler order by priority), then:\n#   synth compile THIS_FILE.py --out DIR -- INSTANCES"
    );
    out.push_str("import argparse\n\nfrom msccl.language import *\n");
    let _ = writeln!(out, "from msccl.language.collectives import {class}");
    let _ = writeln!(out, "from msccl.topologies import {import}\n");
    out.push_str("parser = argparse.ArgumentParser()\nparser.add_argument(\"instances\", type=int, nargs=\"?\", default=1)\nparser.add_argument(\"--protocol\", default=\"Simple\", choices=[\"Simple\", \"LL\", \"LL128\"])\nargs = parser.parse_args()\n\n");
    let _ = writeln!(
        out,
        "with MSCCLProgram({:?}, {topo}, {class}({}, {factor}, False{root}), args.instances,\n                  protocol=args.protocol, threadblock_policy=ThreadblockPolicy.manual,\n                  instr_order=\"program\"):",
        p.name, p.ngpus
    );
    for line in operations(&p)? {
        let _ = writeln!(out, "    {line}");
    }
    out.push_str("    XML()\n    Check()\n");
    Ok(out)
}

/// Writes each algorithm as `DIR/NAME.py`; returns the paths.
pub fn write_programs(algorithms: &[Algorithm], spec: &str, dir: &Path) -> Result<Vec<String>> {
    algorithms
        .iter()
        .map(|a| {
            let path = dir.join(format!("{}.py", a.name));
            std::fs::write(&path, program_text(a, spec)?)
                .with_context(|| format!("{}: cannot write", path.display()))?;
            Ok(path.display().to_string())
        })
        .collect()
}
