//! Property test: random small ring programs (with random extra dependencies, which become
//! nops) survive XML write → read in every flavour, and JSON.

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runtime::builders::{ring_allgather, ring_allreduce, ring_reduce_scatter};
use runtime::ir::{Dep, Flavor, Program, Protocol};
use runtime::xml;

fn build(kind: u8, order: &[usize], channels: usize, inplace: bool) -> Program {
    match kind {
        0 => ring_allgather(order, channels, inplace),
        1 => ring_reduce_scatter(order, channels, inplace),
        _ => ring_allreduce(order, channels, inplace),
    }
}

/// Adds up to two dependencies on other threadblocks to about a quarter of the steps.
fn add_random_deps(p: &mut Program, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for g in &mut p.gpus {
        let lens: Vec<usize> = g.threadblocks.iter().map(|t| t.steps.len()).collect();
        if lens.len() < 2 {
            continue;
        }
        for (tbi, tb) in g.threadblocks.iter_mut().enumerate() {
            for step in &mut tb.steps {
                if rng.gen_range(0..4) != 0 {
                    continue;
                }
                for _ in 0..rng.gen_range(1..=2) {
                    let other = (tbi + rng.gen_range(1..lens.len())) % lens.len();
                    step.deps.push(Dep {
                        tb: other,
                        step: rng.gen_range(0..lens[other]),
                    });
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn ring_programs_round_trip(
        order in (2usize..=6).prop_flat_map(|n| Just((0..n).collect::<Vec<_>>()).prop_shuffle()),
        channels in 1usize..=3,
        inplace in any::<bool>(),
        kind in 0u8..3,
        proto in 0u8..3,
        seed in any::<u64>(),
        max_bytes in prop_oneof![Just(0u64), 1u64..(1 << 40)],
    ) {
        let mut p = build(kind, &order, channels, inplace);
        p.protocol = [Protocol::Simple, Protocol::LL, Protocol::LL128][proto as usize];
        p.max_bytes = max_bytes;
        add_random_deps(&mut p, seed);
        for flavor in Flavor::ALL {
            let text = xml::write(&p, flavor).unwrap();
            prop_assert!(!text.contains('\t') && !text.starts_with("<?"));
            let mut back = xml::read_str(&text).map_err(|e| TestCaseError::fail(format!("{flavor:?}: {e}\n{text}")))?;
            if flavor == Flavor::Legacy {
                // (Unit tests in the writer check legacy_max_bytes's values.)
                let expect = xml::legacy_max_bytes(&p).unwrap();
                prop_assert!(max_bytes == 0 || expect == max_bytes + 1);
                prop_assert_eq!(back.max_bytes, expect);
                back.max_bytes = max_bytes;
            }
            prop_assert_eq!(&back, &p);
            // writing again gives the same text
            prop_assert_eq!(xml::write(&back, flavor).unwrap(), if flavor == Flavor::Legacy { xml::write(&p, flavor).unwrap() } else { text });
        }
        prop_assert_eq!(Program::from_json(&p.to_json()).unwrap(), p);
    }
}

#[test]
fn random_dependencies_produce_nops() {
    let mut p = ring_allreduce(&[0, 1, 2, 3], 3, false);
    add_random_deps(&mut p, 1);
    assert!(
        p.steps().any(|(_, s)| s.deps.len() == 2),
        "some step gets two deps"
    );
    let text = xml::write(&p, Flavor::Nccl).unwrap();
    assert!(text.contains("type=\"nop\""));
    assert!(text.contains("hasdep=\"1\""));
    assert_eq!(xml::read_str(&text).unwrap(), p);
}

/// A program JSON whose bad value holds a line break (an escaped `\n` in a string) gives a
/// one-line error (found by the fuzz target `program_json` at 30,000 cases).
#[test]
fn program_json_errors_are_one_line() {
    let text = Program::to_json(&runtime::builders::direct_allgather(2)).replacen(
        "\"Send\"",
        "\"S\\nd\"",
        1,
    );
    let e = Program::from_json(&text).unwrap_err();
    assert!(
        e.to_string().contains("S\\nd") && !e.to_string().contains('\n'),
        "{e}"
    );
}
