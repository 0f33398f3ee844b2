use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let topo = synth::topology::load(&args[1]).unwrap();
    let t0 = Instant::now();
    let p = runtime::xml::read_file(&args[2]).unwrap();
    eprintln!("read {:.2}", t0.elapsed().as_secs_f64());
    for size in [1u64 << 10, 1 << 16, 1 << 20, 1 << 30] {
        let t0 = Instant::now();
        let r = synth::simulate::simulate(&p, &topo, size, &Default::default()).unwrap();
        eprintln!("size {size}: {:.2} s, events {}, transfers {}, busbw {:.2}", t0.elapsed().as_secs_f64(), r.events, r.transfers, r.busbw);
    }
}
