//! The way back: a synthesized algorithm written as an MSCCLang program, so a user can start
//! from the optimum and hand-tune it. The algorithm is lowered as usual (out of place, one
//! instance); its steps are then listed in an order that the program can execute (a send
//! and its receive together, as a DSL copy is), with the lowered threadblocks and channels
//! pinned, so `synth compile` gives back the same program.

use crate::algorithm::Algorithm;
use crate::lower::{lower, LowerOptions};
use anyhow::{bail, Context, Result};
use runtime::ir::{self, Buffer, Op, Program, StepRef};
use std::collections::HashMap;
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
    let partner: HashMap<StepRef, StepRef> = p.transfer_pairs().into_iter().collect();
    let receiving: std::collections::HashSet<StepRef> = partner.values().copied().collect();
    let mut pc: Vec<Vec<usize>> = p
        .gpus
        .iter()
        .map(|g| vec![0; g.threadblocks.len()])
        .collect();
    let total = p.step_count();
    let mut lines = Vec::with_capacity(total);
    let mut done = 0;
    let ready = |pc: &Vec<Vec<usize>>, at: StepRef| -> bool {
        pc[at.rank][at.tb] == at.step
            && p.step(at)
                .is_some_and(|s| s.deps.iter().all(|d| pc[at.rank][d.tb] > d.step))
    };
    while done < total {
        let before = done;
        for g in &p.gpus {
            for (tb, block) in g.threadblocks.iter().enumerate() {
                let at = StepRef {
                    rank: g.rank,
                    tb,
                    step: pc[g.rank][tb],
                };
                let Some(s) = block.steps.get(at.step) else {
                    continue;
                };
                if receiving.contains(&at) || !ready(&pc, at) {
                    continue;
                }
                let pin = format!("sendtb={tb}, ch={}", block.channel);
                let here = |b: Buffer, off: usize| {
                    format!("chunk({}, {}, {off}, size={})", g.rank, buffer(b), s.count)
                };
                match s.op {
                    Op::Copy => lines.push(format!(
                        "{}.copy({}, {}, {}, {pin})",
                        here(s.src.buffer, s.src.offset),
                        g.rank,
                        buffer(s.dst.buffer),
                        s.dst.offset
                    )),
                    Op::Reduce => lines.push(format!(
                        "{}.reduce({}, {pin})",
                        here(s.dst.buffer, s.dst.offset),
                        here(s.src.buffer, s.src.offset)
                    )),
                    Op::Send => {
                        let r = partner
                            .get(&at)
                            .copied()
                            .context("a send without a receive")?;
                        if !ready(&pc, r) {
                            continue;
                        }
                        let rs = p.step(r).context("a receive step")?;
                        let pins = format!("sendtb={tb}, recvtb={}, ch={}", r.tb, block.channel);
                        let from = here(s.src.buffer, s.src.offset);
                        match rs.op {
                            Op::Recv => lines.push(format!(
                                "{from}.copy({}, {}, {}, {pins})",
                                r.rank,
                                buffer(rs.dst.buffer),
                                rs.dst.offset
                            )),
                            Op::RecvReduceCopy => {
                                let acc = format!(
                                    "chunk({}, {}, {}, size={})",
                                    r.rank,
                                    buffer(rs.dst.buffer),
                                    rs.dst.offset,
                                    rs.count
                                );
                                if rs.src != rs.dst {
                                    lines.push(format!(
                                        "chunk({}, {}, {}, size={}).copy({}, {}, {}, sendtb={}, ch={})",
                                        r.rank, buffer(rs.src.buffer), rs.src.offset, rs.count, r.rank,
                                        buffer(rs.dst.buffer), rs.dst.offset, r.tb, block.channel
                                    ));
                                }
                                lines.push(format!("{acc}.reduce({from}, {pins})"));
                            }
                            other => bail!("cannot write {other} as a DSL operation"),
                        }
                        pc[r.rank][r.tb] += 1;
                        done += 1;
                    }
                    other => bail!("cannot write {other} as a DSL operation"),
                }
                pc[g.rank][tb] += 1;
                done += 1;
            }
        }
        if done == before {
            bail!("the lowered program cannot be listed as a sequence of chunk operations");
        }
    }
    Ok(lines)
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
