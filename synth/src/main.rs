//! The `synth` binary: runs the CLI and turns any error into one line and exit code 1.

fn main() {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = synth::cli::run(std::env::args_os(), &mut stdout) {
        let text = format!("{e:#}").replace('\n', " ");
        eprintln!("error: {text}");
        std::process::exit(1);
    }
}
