use std::time::Instant;
use synth::algorithm::Algorithm;
use synth::lower::{lower, LowerOptions};
fn rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap()
        .to_string()
}
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let a = Algorithm::read(&args[1]).unwrap();
    let t = synth::topology::load(&args[2]).unwrap();
    let s = Instant::now();
    synth::check::check(&a, &t).unwrap();
    println!("check {:?} {}", s.elapsed(), rss());
    let s = Instant::now();
    let p = lower(
        &a,
        &LowerOptions {
            piece_channels: a.chunks(),
            max_transfers: 64,
            ..Default::default()
        },
    )
    .unwrap();
    println!("lower {:?} {}", s.elapsed(), rss());
    let s = Instant::now();
    let x = runtime::xml::write(&p, runtime::ir::Flavor::Nccl);
    println!(
        "write {:?} {} {:?}",
        s.elapsed(),
        rss(),
        x.as_ref().map(|x| x.len()).map_err(|e| e.to_string())
    );
    let s = Instant::now();
    runtime::verify::verify(&p).unwrap();
    println!("verify {:?} {}", s.elapsed(), rss());
    let s = Instant::now();
    let r = synth::simulate::simulate(&p, &t, 1 << 30, &Default::default()).unwrap();
    println!("simulate {:?} {} busbw {:.2}", s.elapsed(), rss(), r.busbw);
}
