//! Times NCCL's baselines for one collective on one fabric: how long building and simulating
//! each takes, and what it simulates at. The main command's limits on its NCCL comparison
//! (`COMPARE_ALLTOALL_MAX_RANKS` in `cli/synth_cmd.rs`) come from these figures.
//!
//! `cargo run --release -p synth --example baseline_sim -- TOPO COLL [SIZE]` (SIZE as
//! everywhere, default 1G).

use std::time::Instant;
use synth::baseline::{self, BaselineOptions};
use synth::collective::Kind;
use synth::cutbound::CutBound;
use synth::simulate::{simulate, SimOptions};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [topo, coll, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: baseline_sim TOPO COLL [SIZE]");
    };
    let size = runtime::cpu::parse_sizes(rest.first().map_or("1G", String::as_str))?[0];
    let topo = synth::topology::load(topo)?;
    let Some(ir) = coll.parse::<Kind>()?.to_ir() else {
        anyhow::bail!("{coll}: no NCCL baseline for custom collectives");
    };
    let options = BaselineOptions::default();
    let bound = CutBound::new(ir, &topo, options.root);
    println!(
        "{ir} on {} ({} ranks) at {size} B; cut bound {:.1} GB/s busbw",
        topo.name,
        topo.ranks,
        bound.busbw_at(size)
    );
    type Builder = fn(
        runtime::ir::Collective,
        &synth::topology::Topology,
        &BaselineOptions,
    ) -> anyhow::Result<runtime::ir::Program>;
    let builders: [(&str, Builder); 3] = [
        ("ring", baseline::ring),
        ("tree", baseline::tree),
        ("p2p", baseline::p2p),
    ];
    for (name, build) in builders {
        let started = Instant::now();
        let Ok(program) = build(ir, &topo, &options) else {
            continue;
        };
        let built = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let r = simulate(&program, &topo, size, &SimOptions::default())?;
        println!(
            "{name}: built in {built:.2} s, simulated in {:.2} s: {:.2} GB/s busbw, {} channels, {} transfers, {} events",
            started.elapsed().as_secs_f64(),
            r.busbw,
            program.nchannels(),
            r.transfers,
            r.events
        );
    }
    Ok(())
}
