//! Fuzz targets for every reader and the command line's numeric options (issue 12): real
//! files of each format, mutated at random (bytes deleted, duplicated or changed, tokens
//! inserted, numbers replaced by extreme values), and arbitrary text. The property: reading
//! never panics and every error is one line. Case counts are fixed (`SYNTH_FUZZ_CASES`, 32 by
//! default per target; `.ci/run` raises it), so the outcome never depends on machine speed.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use runtime::builders::{direct_allgather, direct_alltoall, ring_allgather, ring_allreduce};
use runtime::ir::{Flavor, Program};
use std::path::{Path, PathBuf};
use synth::algorithm::Algorithm;
use synth::collective::Collective;
use synth::sketch::Sketch;
use synth::topology::{self, parse_nvsmi, NvsmiOptions};

/// Values that break naive numeric code: zero, limits of every integer width, floats that
/// do not fit a duration, NaN. (None is a large-but-legal size, which would only be slow.)
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "7",
    "-1",
    "255",
    "4097",
    "32769",
    "65536",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "99999999999999999999999",
    "1e308",
    "-1e308",
    "1e19",
    "1e-320",
    "0.5",
    "nan",
    "inf",
    "-0",
    "0x10",
    "010",
];

/// Syntax fragments of the formats read here.
const TOKENS: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    "=",
    "\"",
    "'",
    ",",
    "\n",
    " ",
    "<",
    ">",
    "/>",
    "</",
    "<!--",
    "-->",
    "[[link]]",
    "[[switch]]",
    "[[chunk]]",
    "[nic]",
    "[multinode]",
    "GPU0",
    "NV",
    "X",
    "SYS",
    "\u{1b}[4m",
    "\u{fffd}",
    "é",
    "\0",
    "\t",
    "\r",
];

/// Cases per target: `SYNTH_FUZZ_CASES`, else 32.
fn cases() -> u32 {
    std::env::var("SYNTH_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

/// One edit of a text: what to do, where, and with what.
type Mutation = (u8, usize, usize);

/// Applies `mutations` to `seed` (byte-wise, then lossily back to UTF-8).
fn mutate(seed: &str, mutations: &[Mutation]) -> String {
    let mut b = seed.as_bytes().to_vec();
    for &(op, pos, arg) in mutations {
        let at = if b.is_empty() { 0 } else { pos % (b.len() + 1) };
        match op % 5 {
            0 => {
                let end = (at + arg % 16).min(b.len());
                b.drain(at..end);
            }
            1 => {
                let t = TOKENS[arg % TOKENS.len()].as_bytes();
                b.splice(at..at, t.iter().copied());
            }
            2 => {
                // Replace the number that starts at or after `at`.
                let Some(start) = b[at..].iter().position(u8::is_ascii_digit) else {
                    continue;
                };
                let start = at + start;
                let len = b[start..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit() || **c == b'.')
                    .count();
                let n = NUMBERS[arg % NUMBERS.len()].as_bytes();
                b.splice(start..start + len, n.iter().copied());
            }
            3 => {
                let end = (at + arg % 64).min(b.len());
                let copy = b[at..end].to_vec();
                b.splice(at..at, copy);
            }
            _ => {
                if at < b.len() {
                    b[at] = b' ' + (arg % 95) as u8;
                }
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Mutated seeds or arbitrary text.
fn inputs(seeds: Vec<String>) -> impl Strategy<Value = String> {
    let n = seeds.len();
    let mutated = (
        0..n,
        prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 0..8),
    )
        .prop_map(move |(i, m)| mutate(&seeds[i], &m));
    prop_oneof![4 => mutated, 1 => "\\PC{0,300}"]
}

/// Asserts that an error is one line.
fn one_line<T, E: std::fmt::Display>(input: &str, r: Result<T, E>) -> Result<(), TestCaseError> {
    if let Err(e) = r {
        let text = format!("{e:#}");
        prop_assert!(
            !text.contains('\n'),
            "error not one line: {text:?}\ninput:\n{input}"
        );
    }
    Ok(())
}

/// Runs `target` on each input; `name` is also the temporary file's name, when one is needed.
fn fuzz(seeds: Vec<String>, target: impl Fn(&str) -> Result<(), TestCaseError>) {
    assert!(!seeds.is_empty());
    runner().run(&inputs(seeds), |text| target(&text)).unwrap();
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files of `dir` (under the repository) whose names end with `ext`.
fn files(dir: &str, ext: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(repo().join(dir)).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(ext) {
            out.push(std::fs::read_to_string(path).unwrap());
        }
    }
    out
}

/// A scratch folder for one target's files, removed when the returned guard drops (also when
/// the target fails).
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("synth-fuzz-")
        .tempdir()
        .unwrap()
}

const NVSMI: &str = "\t\u{1b}[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\u{1b}[0m\n\
GPU0\t X \tNV1\tNV1\tNV2\tSYS\t0-63\n\
GPU1\tNV1\t X \tNV2\tNV1\tSYS\t0-63\n\
GPU2\tNV1\tNV2\t X \tNV1\tPXB\t0-63\n\
GPU3\tNV2\tNV1\tNV1\t X \tPXB\t0-63\n\
NIC0\tSYS\tSYS\tPXB\tPXB\t X\n\nLegend:\n\n  X    = Self\n";

#[test]
fn topology_toml() {
    let mut seeds = files("topologies", ".toml");
    seeds.push("[multinode]\nnode = \"dgx-a100\"\nnodes = 2\nnetwork = \"rail\"\n".into());
    seeds.push("ranks = 4\nnode_of = [0, 0, 1, 1]\n[[link]]\nsrc = 0\ndst = 3\n".into());
    let tmp = scratch();
    let path = tmp.path().join("topology.toml");
    fuzz(seeds, |text| {
        std::fs::write(&path, text).unwrap();
        one_line(text, topology::load(path.to_str().unwrap()))
    });
}

#[test]
fn nccl_topology_dump() {
    let tmp = scratch();
    let path = tmp.path().join("system.xml");
    fuzz(files("synth/tests/data/nccl-topo", ".xml"), |text| {
        std::fs::write(&path, text).unwrap();
        one_line(text, topology::load(path.to_str().unwrap()))?;
        one_line(
            text,
            topology::load_nodes(path.to_str().unwrap(), Some(2), None),
        )
    });
}

#[test]
fn nvidia_smi_topo_m() {
    let tmp = scratch();
    let path = tmp.path().join("nvsmi.txt");
    fuzz(vec![NVSMI.to_string()], |text| {
        one_line(text, parse_nvsmi(text, "fuzz", &NvsmiOptions::default()))?;
        std::fs::write(&path, text).unwrap();
        one_line(text, topology::load(&format!("nvsmi:{}", path.display())))
    });
}

#[test]
fn sketch_toml() {
    fuzz(files("sketches", ".toml"), |text| {
        one_line(text, Sketch::parse("fuzz.toml", text))
    });
}

#[test]
fn collective_files() {
    let toml = "ranks = 4\n[[chunk]]\npre = [0]\npost = [1, 2, 3]\n[[chunk]]\npre = [1]\npost = [0]\naddress = 3\n";
    let json = r#"{"ranks": 3, "chunk": [{"pre": [0], "post": [1, 2]}, {"pre": [2], "post": [0], "address": 5}]}"#;
    let tmp = scratch();
    let (t, j) = (
        tmp.path().join("collective.toml"),
        tmp.path().join("collective.json"),
    );
    fuzz(vec![toml.into(), json.into()], |text| {
        for path in [&t, &j] {
            std::fs::write(path, text).unwrap();
            one_line(text, Collective::from_file(path.to_str().unwrap(), 2))?;
        }
        Ok(())
    });
}

/// Programs of several shapes, written as XML.
fn xml_seeds() -> Vec<String> {
    let programs = [
        direct_allgather(3),
        direct_alltoall(2),
        ring_allgather(&[0, 1, 2, 3], 2, false),
        ring_allreduce(&[0, 1, 2], 1, true),
    ];
    let mut seeds: Vec<String> = programs
        .iter()
        .map(|p| runtime::xml::write(p, Flavor::Nccl).unwrap())
        .collect();
    seeds.extend(
        files("results/multinode/dgx-a100x2", ".xml")
            .into_iter()
            .take(2),
    );
    seeds
}

#[test]
fn msccl_xml() {
    fuzz(xml_seeds(), |text| {
        let read = runtime::xml::read_str(text);
        if let Ok(p) = &read {
            one_line(text, runtime::verify::verify(p))?;
        }
        one_line(text, read)
    });
}

#[test]
fn program_json() {
    let seeds = [direct_allgather(2), ring_allreduce(&[0, 1, 2], 1, false)]
        .iter()
        .map(Program::to_json)
        .collect();
    fuzz(seeds, |text| {
        let read = Program::from_json(text);
        if let Ok(p) = &read {
            one_line(text, runtime::verify::verify(p))?;
        }
        one_line(text, read)
    });
}

#[test]
fn algorithm_json() {
    let seeds = files("results/multinode/dgx-a100x2", ".json");
    let topo = topology::load("dgx-a100x2").unwrap();
    let tmp = scratch();
    let path = tmp.path().join("algorithm.json");
    fuzz(seeds, |text| {
        std::fs::write(&path, text).unwrap();
        let read = Algorithm::read(path.to_str().unwrap());
        if let Ok(a) = &read {
            one_line(text, synth::check::check(a, &topo))?;
        }
        one_line(text, read)
    });
}

/// Algorithm files as `synth lower`, `verify` and `simulate` read them: msccl-tools JSON
/// (`msccl_type`) and synth's algorithm JSON; a file that reads is lowered too.
#[test]
fn algorithm_files_for_lower() {
    let mut seeds = files("synth/tests/data", ".msccl.json");
    seeds.extend(
        files("results/multinode/dgx-a100x2", ".json")
            .into_iter()
            .take(1),
    );
    let tmp = scratch();
    let path = tmp.path().join("lower.json");
    fuzz(seeds, |text| {
        std::fs::write(&path, text).unwrap();
        let read = synth::algo_file::read_algorithm(path.to_str().unwrap(), None);
        if let Ok(l) = &read {
            let options = synth::lower::LowerOptions::default();
            one_line(text, synth::lower::lower_to_xml(&l.algorithm, &options))?;
        }
        one_line(text, read)
    });
}

/// A numeric option value: an extreme number, a short integer, or number-like text. It never
/// starts with `-` and a letter, which clap would take for a flag such as `-h`. Legal sizes
/// stay small (large legal fabrics are only slow, and the case counts are fixed).
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(NUMBERS).prop_map(str::to_string),
        "[0-9]{1,2}",
        "[0-9]{5,24}",
        "-?[0-9]{0,2}(\\.[0-9]{0,4})?([eE]-?[0-9]{1,3})?[KMGkmgB]?",
        "[0-9]{1,2}[:x,][0-9]{1,2}(:[0-9]{1,2})?",
    ]
}

/// Command lines that fail after parsing (a missing file, an unknown bench case), each with
/// its numeric options; a fuzzed value is either rejected by the parser or reaches that
/// failure, so nothing is ever solved.
const COMMANDS: &[(&[&str], &[&str])] = &[
    (
        &["--topo", "/nonexistent/t.toml", "--coll", "allgather"],
        &[
            "--steps",
            "--rounds",
            "--chunks",
            "--max-steps",
            "--max-chunks",
            "--time-limit",
            "--instances",
            "--min-bytes",
            "--max-bytes",
        ],
    ),
    (
        &["catalog", "--topo", "/nonexistent/t.toml"],
        &[
            "--time-limit",
            "--max-steps",
            "--max-chunks",
            "--instances",
            "--sizes",
            "--local-bw",
            "--add",
        ],
    ),
    (
        &["bench", "--cases", "no-such-case"],
        &["--repeat", "--time-limit"],
    ),
    (
        &["run", "/nonexistent/a.xml"],
        &["--size", "--sizes", "--iters", "--warmup"],
    ),
    (
        &["simulate", "/nonexistent/a.xml", "--topo", "ring:4"],
        &["--sizes", "--local-bw"],
    ),
    (
        &["bounds", "--topo", "ring:4", "--coll", "broadcast"],
        &["--root"],
    ),
];

#[test]
fn cli_numeric_options() {
    let options: Vec<(usize, usize)> = COMMANDS
        .iter()
        .enumerate()
        .flat_map(|(c, (_, opts))| (0..opts.len()).map(move |o| (c, o)))
        .collect();
    let strategy = (prop::sample::select(options), number());
    runner()
        .run(&strategy, |((c, o), value)| {
            let (base, opts) = COMMANDS[c];
            let mut args = vec!["synth"];
            args.extend_from_slice(base);
            let option = format!("{}={value}", opts[o]);
            args.push(&option);
            let mut out = Vec::new();
            let r = synth::cli::run(&args, &mut out);
            one_line(&option, r)
        })
        .unwrap();
}

#[test]
fn generator_sizes() {
    const NAMES: [&str; 11] = [
        "ring",
        "line",
        "star",
        "fully-connected",
        "hub-and-spoke",
        "shared-hub",
        "torus-2d",
        "torus-3d",
        "mesh-2d",
        "hypercube",
        "random",
    ];
    let strategy = (prop::sample::select(&NAMES[..]), number());
    runner()
        .run(&strategy, |(name, size)| {
            let spec = format!("{name}:{size}");
            one_line(&spec, topology::load(&spec))
        })
        .unwrap();
}

/// The example MSCCLang programs with the arguments their `# Run:` line gives.
fn dsl_examples() -> Vec<(String, Vec<String>)> {
    let dir = repo().join("examples/dsl");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "py") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let args = text
            .lines()
            .find(|l| l.starts_with("# Run:"))
            .and_then(|l| l.split_once(" -- "))
            .map(|(_, a)| a.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        out.push((text, args));
    }
    out.sort();
    out
}

/// Replays and compiles traced programs as `synth compile` does, each error one line.
fn compile_traces(
    input: &str,
    traced: anyhow::Result<Vec<synth::dsl::trace::TraceProgram>>,
) -> Result<(), TestCaseError> {
    use synth::dsl::trace::{replay, Overrides};
    let traced = match traced {
        Ok(t) => t,
        Err(e) => return one_line::<(), _>(input, Err(e)),
    };
    for t in &traced {
        match replay(t, &Overrides::default()) {
            Ok(r) => {
                for c in &r.checks {
                    one_line(input, c.clone())?;
                }
                one_line(input, r.program.compile())?;
            }
            Err(e) => one_line::<(), _>(input, Err(e))?,
        }
    }
    Ok(())
}

/// MSCCLang programs (the examples, mutated) run by `synth compile`'s front end. Each run
/// starts Python, so this target runs a twentieth of the cases (at least 8), each under a
/// 20 s limit (a mutation can make a loop endless).
#[test]
fn dsl_programs() {
    let examples = dsl_examples();
    assert!(!examples.is_empty());
    let tmp = scratch();
    let path = tmp.path().join("program.py");
    let runner = || {
        TestRunner::new(Config {
            cases: (cases() / 20).max(8),
            failure_persistence: None,
            ..Config::default()
        })
    };
    let strategy = (
        0..examples.len(),
        prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 0..6),
    );
    runner()
        .run(&strategy, |(i, m)| {
            let (seed, args) = &examples[i];
            let text = mutate(seed, &m);
            std::fs::write(&path, &text).unwrap();
            let traced = synth::dsl::frontend::run_script(path.to_str().unwrap(), args, 20.0);
            compile_traces(&text, traced)
        })
        .unwrap();
}

/// The traces the front end reads back from Python (`synth compile TRACE.json` reads them
/// too), mutated.
#[test]
fn dsl_traces() {
    let tmp = scratch();
    let mut seeds = Vec::new();
    for (i, (text, args)) in dsl_examples().into_iter().enumerate() {
        let program = tmp.path().join(format!("seed-{i}.py"));
        std::fs::write(&program, &text).unwrap();
        let traced = synth::dsl::frontend::run_script(program.to_str().unwrap(), &args, 60.0)
            .expect("the examples run");
        seeds.push(serde_json::to_string(&traced).unwrap());
    }
    let path = tmp.path().join("trace.json");
    fuzz(seeds, |text| {
        std::fs::write(&path, text).unwrap();
        let traced = synth::dsl::trace::read(path.to_str().unwrap());
        compile_traces(text, traced)
    });
}
