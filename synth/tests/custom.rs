//! Custom collectives end to end: combining ones solved as duals and checked, collectives
//! with nothing to deliver, custom collectives equal to a built-in, and their MSCCL XML.

use std::time::{Duration, Instant};
use synth::check::check;
use synth::collective::Collective;
use synth::progress::Progress;
use synth::smt::Limits;
use synth::synthesize::{synthesize_with, Method, Request, Search, Synthesis};
use synth::topology;

/// (pre, post, address) of one chunk, owned.
type OwnedChunk = (Vec<usize>, Vec<usize>, Option<usize>);

/// A custom collective file: `ranks` and (pre, post, address) per chunk.
fn toml(ranks: usize, chunks: &[(&[usize], &[usize], Option<usize>)]) -> String {
    let mut s = format!("ranks = {ranks}\n");
    for (pre, post, address) in chunks {
        s += &format!("[[chunk]]\npre = {pre:?}\npost = {post:?}\n");
        if let Some(a) = address {
            s += &format!("address = {a}\n");
        }
    }
    s
}

fn solve(topo: &str, text: &str, search: Search, max_chunks: usize) -> anyhow::Result<Synthesis> {
    let topology = topology::load(topo).unwrap();
    let progress = Progress::hidden();
    let collective = Collective::from_text("test.toml", text, 1)?;
    let request = Request {
        topology: &topology,
        collective,
        search,
        limits: Limits {
            max_steps: 8,
            max_chunks,
            max_chunks_given: false,
            deadline: Instant::now() + Duration::from_secs(600),
            extra_memory: None,
            work_limit: None,
        },
        progress: &progress,
    };
    let s = synthesize_with(&request, Method::Auto, None)?;
    for a in &s.algorithms {
        check(a, &topology).unwrap_or_else(|e| panic!("{}: {e}", a.name));
    }
    Ok(s)
}

/// Partial reductions (not every rank contributes, the destination need not contribute,
/// several destinations) on small fabrics: every answer passes the checker. Before duals
/// were pruned, a relay that received the dual's chunk but did not need it became a rank
/// sending data it never held (robustness issue, item 1).
#[test]
fn combining_custom_collectives_pass_the_checker() {
    let reduce_to = |_ranks: usize, from: &[usize], to: usize, address: usize| {
        from.iter()
            .map(|&r| (vec![r], vec![to], Some(address)))
            .collect::<Vec<_>>()
    };
    let cases: Vec<(&str, usize, Vec<OwnedChunk>)> = vec![
        // the reported case: odd ranks reduced onto 6 on a DGX-1
        ("dgx1", 8, reduce_to(8, &[1, 3, 5, 7], 6, 0)),
        ("dgx1", 8, reduce_to(8, &[0, 1, 2], 7, 0)),
        ("dgx1", 8, {
            let mut v = reduce_to(8, &[0, 5], 3, 0);
            v.extend(reduce_to(8, &[2, 6, 7], 1, 1));
            v
        }),
        ("ring:4", 4, reduce_to(4, &[0, 2], 1, 0)),
        ("ring:4", 4, reduce_to(4, &[1, 3], 0, 0)),
        ("ring:4", 4, {
            let mut v = reduce_to(4, &[0, 1], 2, 0);
            v.extend(reduce_to(4, &[2, 3], 0, 1));
            v.push((vec![1], vec![3], None));
            v
        }),
        ("line:3", 3, reduce_to(3, &[0, 2], 0, 0)),
        ("line:3", 3, reduce_to(3, &[0, 2], 1, 0)),
        ("line:3", 3, {
            let mut v = reduce_to(3, &[1, 2], 0, 0);
            v.extend(reduce_to(3, &[0, 1], 2, 1));
            v
        }),
    ];
    for (topo, ranks, chunks) in &cases {
        let chunks: Vec<(&[usize], &[usize], Option<usize>)> = chunks
            .iter()
            .map(|(a, b, c)| (a.as_slice(), b.as_slice(), *c))
            .collect();
        let text = toml(*ranks, &chunks);
        for search in [
            Search::LeastSteps {
                chunks: 1,
                rounds: None,
            },
            Search::LeastSteps {
                chunks: 3,
                rounds: None,
            },
        ] {
            let s = solve(topo, &text, search, 3)
                .unwrap_or_else(|e| panic!("{topo} {search:?}\n{text}: {e:#}"));
            assert!(!s.algorithms.is_empty(), "{topo} {search:?}\n{text}");
        }
    }
    // The exact instance of the report.
    let text = toml(
        8,
        &[1usize, 3, 5, 7]
            .iter()
            .map(|r| (std::slice::from_ref(r), &[6usize][..], Some(0)))
            .collect::<Vec<_>>(),
    );
    let s = solve(
        "dgx1",
        &text,
        Search::Instance {
            steps: 3,
            rounds: 3,
            chunks: 6,
        },
        6,
    )
    .unwrap();
    assert_eq!(s.algorithms.len(), 1);
}

/// A combining chunk held by several ranks would be counted once per holder: refused.
#[test]
fn combining_chunk_on_several_ranks_is_refused() {
    let text = toml(4, &[(&[0, 1], &[2], Some(0)), (&[3], &[2], Some(0))]);
    let e = Collective::from_text("x.toml", &text, 1).unwrap_err();
    assert!(format!("{e:#}").contains("starts on 2 ranks"), "{e:#}");
    // Two chunks of one reduction on one rank: one input slot cannot hold both.
    let text = toml(3, &[(&[1], &[0], Some(0)), (&[1], &[0], Some(0))]);
    let e = Collective::from_text("x.toml", &text, 1).unwrap_err();
    assert!(
        format!("{e:#}").contains("two chunks starting on rank 1"),
        "{e:#}"
    );
}

/// Nothing to deliver: every rank that must end with a chunk starts with it. The bound is 0
/// steps and the answer is the one 0-step algorithm, complete (robustness issue, item 6:
/// it used to be a 1-step PARTIAL result).
#[test]
fn nothing_to_deliver_is_a_zero_step_algorithm() {
    let text = toml(
        4,
        &[
            (&[0], &[0], None),
            (&[1, 2], &[2], None),
            (&[3], &[], None),
            (&[1], &[1], Some(7)),
        ],
    );
    for search in [
        Search::Pareto,
        Search::LeastSteps {
            chunks: 2,
            rounds: None,
        },
    ] {
        let s = solve("ring:4", &text, search, 4).unwrap();
        assert_eq!(s.bounds.steps, 0);
        assert_eq!(s.bounds.rounds_per_chunk, "0");
        assert!(s.complete, "{search:?}");
        assert_eq!(s.algorithms.len(), 1);
        assert_eq!(s.algorithms[0].num_steps(), 0);
        assert_eq!(s.algorithms[0].rounds(), 0);
    }
    // The simulator's bound column must not claim a latency a 0-step custom program beats.
    let topo = topology::load("ring:4").unwrap();
    let bound = synth::cutbound::CutBound::new(runtime::ir::Collective::Custom, &topo, 0);
    assert_eq!(bound.hops, 0);
}

/// Lowers out of place and in place in every flavour, verifies, writes the XML (the
/// conditions ride in a leading comment), reads it back with its conditions, verifies again
/// and runs it on the CPU executor: no wrong element.
fn exercise(algorithm: &synth::algorithm::Algorithm) {
    use runtime::cpu::{run, DataType, RunOptions};
    use runtime::ir::{Collective as Ir, Flavor};
    use synth::lower::{lower, LowerOptions};
    for inplace in [false, true] {
        for flavor in Flavor::ALL {
            for instances in [1, 2] {
                let what = format!(
                    "{} inplace={inplace} {flavor:?} x{instances}",
                    algorithm.name
                );
                let options = LowerOptions {
                    flavor,
                    inplace,
                    instances,
                    ..LowerOptions::default()
                };
                let program =
                    lower(algorithm, &options).unwrap_or_else(|e| panic!("{what}: {e:#}"));
                assert_eq!(program.collective, Ir::Custom);
                runtime::verify::verify(&program).unwrap_or_else(|e| panic!("{what}: {e}"));
                // Only the legacy runtime loads `coll="custom"`: the others' XML is refused.
                if flavor != Flavor::Legacy {
                    assert!(runtime::xml::write(&program, flavor).is_err(), "{what}");
                    continue;
                }
                let xml =
                    runtime::xml::write(&program, flavor).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(xml.starts_with("<!-- synth-custom {"), "{what}");
                assert!(xml.contains(" coll=\"custom\" "), "{what}");
                let back = runtime::xml::read_str(&xml).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(back.custom, program.custom, "{what}");
                runtime::verify::verify(&back).unwrap_or_else(|e| panic!("{what}: {e}"));
                let mut opts = RunOptions::for_bytes(&back, 1 << 16, DataType::F32);
                opts.inplace = inplace;
                let report = run(&back, &opts).unwrap_or_else(|e| panic!("{what}: {e:#}"));
                assert_eq!(report.wrong, 0, "{what}");
            }
        }
    }
}

/// Usability issue, item 5: custom collectives lower to `coll="custom"` XML whose conditions
/// synth reads back, verifies and runs: copies, chunks held by several ranks, partial
/// reductions, and a 0-step algorithm (local copies only).
#[test]
fn custom_collectives_lower_verify_and_run() {
    let cases: Vec<(&str, String)> = vec![
        (
            "ring:4",
            toml(
                4,
                &[
                    (&[0], &[1, 2, 3], None),
                    (&[3], &[0], None),
                    (&[1, 2], &[0, 3], None),
                ],
            ),
        ),
        (
            "dgx1",
            toml(
                8,
                &[
                    (&[1], &[6], Some(0)),
                    (&[3], &[6], Some(0)),
                    (&[5], &[6], Some(0)),
                    (&[7], &[6], Some(0)),
                ],
            ),
        ),
        (
            "line:3",
            toml(
                3,
                &[
                    (&[0], &[2], Some(0)),
                    (&[2], &[2], Some(0)),
                    (&[1], &[0], Some(1)),
                    (&[2], &[0], Some(1)),
                ],
            ),
        ),
        (
            "ring:4",
            toml(4, &[(&[0], &[0], None), (&[1, 2], &[2], None)]),
        ),
    ];
    for (topo, text) in &cases {
        let s = solve(
            topo,
            text,
            Search::LeastSteps {
                chunks: 2,
                rounds: None,
            },
            2,
        )
        .unwrap();
        exercise(&s.algorithms[0]);
    }
}

/// A custom program whose output misses a contribution fails verification, and XML with
/// `coll="custom"` but no conditions is refused in one line.
#[test]
fn custom_conditions_are_checked() {
    let text = toml(3, &[(&[0], &[2], Some(0)), (&[1], &[2], Some(0))]);
    let s = solve(
        "line:3",
        &text,
        Search::LeastSteps {
            chunks: 1,
            rounds: None,
        },
        1,
    )
    .unwrap();
    let mut program =
        synth::lower::lower(&s.algorithms[0], &synth::lower::LowerOptions::default()).unwrap();
    runtime::verify::verify(&program).unwrap();
    let custom = program.custom.as_mut().unwrap();
    custom.post[0]
        .sum
        .push(runtime::semantics::Contribution { rank: 2, chunk: 0 });
    let e = runtime::verify::verify(&program).unwrap_err().to_string();
    assert!(e.contains("rank 2"), "{e}");
    let xml = runtime::xml::write(&program, runtime::ir::Flavor::Legacy).unwrap();
    let bare: String = xml.lines().skip(1).map(|l| format!("{l}\n")).collect();
    // Without synth's condition comment (as another tool writes it) the file still reads,
    // its postcondition unknown: the checks that need no postcondition still run.
    let read = runtime::xml::read_str(&bare).unwrap();
    assert!(!read.postcondition_known());
    runtime::verify::verify(&read).unwrap();
}

/// Robustness issue, item 5: a custom collective equal to a built-in (addresses renumbered,
/// postconditions with or without the source rank) is recognised and solved as it.
#[test]
fn custom_collectives_equal_to_builtins_are_recognised() {
    use synth::collective::Kind;
    let n = 4;
    let all: Vec<usize> = (0..n).collect();
    let others = |r: usize| all.iter().copied().filter(|&x| x != r).collect::<Vec<_>>();
    let file = |chunks: Vec<OwnedChunk>| {
        let c: Vec<(&[usize], &[usize], Option<usize>)> = chunks
            .iter()
            .map(|(a, b, c)| (a.as_slice(), b.as_slice(), *c))
            .collect();
        toml(n, &c)
    };
    let cases: Vec<(Kind, usize, String)> = vec![
        // allgather, addresses in reverse order, post without the source
        (
            Kind::AllGather,
            0,
            file((0..n).rev().map(|r| (vec![r], others(r), None)).collect()),
        ),
        (
            Kind::AllGather,
            0,
            file((0..n).map(|r| (vec![r], all.clone(), None)).collect()),
        ),
        (Kind::Broadcast, 2, file(vec![(vec![2], all.clone(), None)])),
        (
            Kind::Reduce,
            1,
            file((0..n).map(|r| (vec![r], vec![1], Some(0))).collect()),
        ),
        (
            Kind::Gather,
            3,
            file((0..n).map(|r| (vec![r], vec![3], None)).collect()),
        ),
        (
            Kind::Scatter,
            0,
            file((0..n).map(|r| (vec![0], vec![r], None)).collect()),
        ),
        (
            Kind::ReduceScatter,
            0,
            file(
                (0..n)
                    .flat_map(|d| (0..n).map(move |s| (vec![s], vec![d], Some(d))))
                    .collect(),
            ),
        ),
        (
            Kind::AllToAll,
            0,
            file(
                (0..n)
                    .flat_map(|d| (0..n).map(move |s| (vec![s], vec![d], None)))
                    .collect(),
            ),
        ),
        (
            Kind::AllReduce,
            0,
            file(
                (0..n)
                    .flat_map(|a| (0..n).map(move |s| (vec![s], (0..n).collect(), Some(a))))
                    .collect(),
            ),
        ),
    ];
    for (kind, root, text) in &cases {
        let c =
            Collective::from_text("x.toml", text, 1).unwrap_or_else(|e| panic!("{kind}: {e:#}"));
        let b = c
            .builtin()
            .unwrap_or_else(|| panic!("{kind} not recognised:\n{text}"));
        assert_eq!((b.kind, b.root), (*kind, *root), "{text}");
        let s = solve(
            "ring:4",
            text,
            Search::LeastSteps {
                chunks: 1,
                rounds: None,
            },
            1,
        )
        .unwrap();
        assert_eq!(
            s.algorithms[0].collective.kind, *kind,
            "solved as the built-in"
        );
    }
    // Not a built-in: a partial allgather.
    let text = file((0..n - 1).map(|r| (vec![r], all.clone(), None)).collect());
    assert!(Collective::from_text("x.toml", &text, 1)
        .unwrap()
        .builtin()
        .is_none());
}

/// Every contributor of `from` reduced into address `address`, to end on every rank of `to`.
fn reduce_onto(from: &[usize], to: &[usize], address: usize) -> Vec<OwnedChunk> {
    from.iter()
        .map(|&r| (vec![r], to.to_vec(), Some(address)))
        .collect()
}

/// The custom collective file of `chunks`.
fn file_of(ranks: usize, chunks: &[OwnedChunk]) -> String {
    let c: Vec<(&[usize], &[usize], Option<usize>)> = chunks
        .iter()
        .map(|(a, b, c)| (a.as_slice(), b.as_slice(), *c))
        .collect();
    toml(ranks, &c)
}

/// Issue 29 item 4a: reductions whose address ends on several ranks (onto a node's ranks,
/// an allreduce within each half, a partial allreduce among a subset, mixed with copies and
/// single-destination reductions) are solved as a reduce phase then a spread phase on
/// generated fabrics (SMT on the small ones, the greedy engine on the torus), pass the
/// checker (each destination holds every contribution once), lower in every flavour,
/// verify and run on the CPU executor with no wrong element.
#[test]
fn reductions_onto_several_ranks_are_solved_checked_and_run() {
    use synth::origin::Family;
    let cases: Vec<(&str, usize, Vec<OwnedChunk>, usize)> = vec![
        // a partial allreduce among 0, 1 and 2 (one address, three pieces)
        ("ring:4", 4, reduce_onto(&[0, 1, 2], &[0, 1, 2], 0), 3),
        // allreduce within each half
        (
            "line:4",
            4,
            {
                let mut v = reduce_onto(&[0, 1], &[0, 1], 0);
                v.extend(reduce_onto(&[2, 3], &[2, 3], 1));
                v
            },
            2,
        ),
        // every rank's input reduced onto ranks 0 and 3 (two destinations, one address),
        // beside a copy to several ranks and a reduction onto one rank
        (
            "ring:4",
            4,
            {
                let mut v = reduce_onto(&[0, 1, 2, 3], &[0, 3], 0);
                v.push((vec![1], vec![0, 2, 3], Some(1)));
                v.extend(reduce_onto(&[0, 2], &[1], 2));
                v
            },
            2,
        ),
        // reduce onto the 4 ranks 0..4 of a random 6-rank fabric, from every rank
        (
            "random:6:3",
            6,
            reduce_onto(&[0, 1, 2, 3, 4, 5], &[0, 1, 2, 3], 0),
            4,
        ),
        // a 3x3 torus (greedy engine): each row's inputs reduced onto that row
        (
            "torus-2d:3x3",
            9,
            {
                let mut v = reduce_onto(&[0, 1, 2], &[0, 1, 2], 0);
                v.extend(reduce_onto(&[3, 4, 5], &[3, 4, 5], 1));
                v.extend(reduce_onto(&[6, 7, 8], &[6, 7, 8], 2));
                v
            },
            3,
        ),
    ];
    for (topo, ranks, chunks, pieces) in &cases {
        let text = file_of(*ranks, chunks);
        let collective = Collective::from_text("multi.toml", &text, 1).unwrap();
        assert!(collective.ends_on_many(), "{text}");
        assert!(collective.builtin().is_none(), "{text}");
        assert_eq!(collective.phases().unwrap().pieces, *pieces, "{text}");
        let s = solve(
            topo,
            &text,
            Search::LeastSteps {
                chunks: 1,
                rounds: None,
            },
            2,
        )
        .unwrap_or_else(|e| panic!("{topo}\n{text}: {e:#}"));
        // The two-phase answer (beside it, `auto` offers direct schedules: tests/direct.rs).
        let a = (s.algorithms.iter())
            .find(|a| matches!(a.origin.family, Family::ReduceSpread { .. }))
            .unwrap_or_else(|| panic!("{topo}: no reduce + spread algorithm\n{text}"));
        assert_eq!(a.chunks() % pieces, 0, "{}", a.name);
        assert!(s.bounds.steps <= a.num_steps(), "{}", a.name);
        exercise(a);
    }
}

/// The checker holds the spread phase to its word: the same reduce + spread algorithm with
/// the last send dropped, or with a destination's reduction sent twice (a contribution
/// counted twice), fails it.
#[test]
fn reductions_onto_several_ranks_are_checked() {
    let text = file_of(4, &reduce_onto(&[0, 1, 2, 3], &[1, 2], 0));
    let s = solve(
        "line:4",
        &text,
        Search::LeastSteps {
            chunks: 1,
            rounds: None,
        },
        1,
    )
    .unwrap();
    let topology = topology::load("line:4").unwrap();
    let phased = (s.algorithms.iter())
        .find(|a| matches!(a.origin.family, synth::origin::Family::ReduceSpread { .. }))
        .expect("a reduce + spread algorithm");
    let mut short = phased.clone();
    let last = short.steps.last_mut().unwrap();
    last.sends.pop();
    if last.sends.is_empty() {
        short.steps.pop();
    }
    assert!(check(&short, &topology).is_err());
    // The reduce phase's first step again: every contribution it moves is counted twice.
    let mut twice = phased.clone();
    let first = twice.steps[0].clone();
    assert!(first.reduce);
    twice.steps.insert(1, first);
    let e = check(&twice, &topology).unwrap_err().to_string();
    assert!(e.contains("twice") || e.contains("more than once"), "{e}");
}

/// Reductions onto several ranks that cannot be solved are one-line errors naming the
/// address: a destination no contributor can reach, and a reduced address ending nowhere.
#[test]
fn impossible_reductions_onto_several_ranks_are_refused() {
    // Ranks 0-1 and 2-3 are not joined: rank 2 cannot receive rank 0's contribution.
    let file = tempfile::Builder::new()
        .prefix("synth-split-")
        .suffix(".toml")
        .tempfile()
        .unwrap();
    let path = file.path();
    std::fs::write(
        path,
        "name = \"split\"\nranks = 4\nbandwidth = 25\n[[link]]\nsrc = 0\ndst = 1\n[[link]]\nsrc = 2\ndst = 3\n",
    )
    .unwrap();
    let split = topology::load(path.to_str().unwrap()).unwrap();
    let text = file_of(4, &reduce_onto(&[0, 1], &[1, 2], 0));
    let collective = Collective::from_text("x.toml", &text, 1).unwrap();
    let e = synth::bounds::reduction_bounds(&split, &collective)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("address 0") && e.contains("cannot reach rank 2"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    let text = toml(
        4,
        &[
            (&[0], &[], Some(0)),
            (&[1], &[], Some(0)),
            (&[2], &[1, 3], None),
        ],
    );
    let e = format!(
        "{:#}",
        Collective::from_text("x.toml", &text, 1).unwrap_err()
    );
    assert!(
        e.contains("address 0 is reduced but ends on no rank"),
        "{e}"
    );
    assert!(e.len() <= 300 && e.lines().count() == 1, "{e}");
}
