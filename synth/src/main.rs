//! The `synth` binary: runs the CLI and turns any error into one line and exit code 1.

/// mimalloc: lowering a 1024-rank fabric allocates and frees gigabytes in small pieces;
/// glibc hands the pages back and faults them in again (torus-2d:32x32 allgather: 63 s with
/// glibc, 44 s with mimalloc).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = synth::cli::run(std::env::args_os(), &mut stdout) {
        synth::cli::print_error(&e);
        std::process::exit(1);
    }
}
