//! The three real MSCCL XML fixtures: golden parse values, verification, CPU execution,
//! and XML round trips.

mod common;

use common::{assert_runs_correctly, required_fixture};
use runtime::ir::{Collective, Flavor, Op, Program, Protocol};
use runtime::{verify, xml};

struct Golden {
    file: &'static str,
    collective: Collective,
    protocol: Protocol,
    ngpus: usize,
    nchunks: usize,
    nchannels: usize,
    bytes: (u64, u64),
    modes: (bool, bool),
    blocks: usize,
    scratch: usize,
    transmissions: usize,
    xml_steps: usize,
}

const GOLDEN: [Golden; 3] = [
    Golden {
        file: "allreduce-1step-3gpu-LL-inplace.xml",
        collective: Collective::AllReduce,
        protocol: Protocol::LL,
        ngpus: 3,
        nchunks: 3,
        nchannels: 1,
        bytes: (0, 0),
        modes: (true, false),
        blocks: 3,
        scratch: 6,
        transmissions: 7,
        xml_steps: 39,
    },
    Golden {
        file: "allreduce-ring-4gpu-Simple-inplace.xml",
        collective: Collective::AllReduce,
        protocol: Protocol::Simple,
        ngpus: 4,
        nchunks: 4,
        nchannels: 1,
        bytes: (0, 0),
        modes: (true, false),
        blocks: 1,
        scratch: 0,
        transmissions: 7,
        xml_steps: 28,
    },
    Golden {
        file: "alltoall-8n-0-9kb.xml",
        collective: Collective::AllToAll,
        protocol: Protocol::LL,
        ngpus: 8,
        nchunks: 8,
        nchannels: 1,
        bytes: (0, 9216),
        modes: (false, true),
        blocks: 15,
        scratch: 0,
        transmissions: 15,
        xml_steps: 120,
    },
];

fn load(g: &Golden) -> (String, Program) {
    let text = required_fixture(g.file);
    let p = xml::read_str(&text).unwrap_or_else(|e| panic!("{}: {e}", g.file));
    (text, p)
}

/// `cfg(has_shared_fixtures)` (set by `runtime/build.rs`) says whether the fixtures exist, so
/// the tests below are ignored, not passed, where they are absent.
#[test]
fn the_fixture_cfg_matches_the_folder() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures");
    assert_eq!(
        cfg!(has_shared_fixtures),
        std::path::Path::new(dir).is_dir(),
        "{dir}: `touch runtime/build.rs` after adding or removing ../shared"
    );
}

#[test]
#[cfg_attr(not(has_shared_fixtures), ignore = "needs ../shared/fixtures")]
fn fixtures_parse_with_golden_values() {
    for g in &GOLDEN {
        let (text, p) = load(g);
        assert_eq!(p.collective, g.collective, "{}", g.file);
        assert_eq!(p.protocol, g.protocol, "{}", g.file);
        assert_eq!(p.ngpus, g.ngpus, "{}", g.file);
        assert_eq!(p.nchunksperloop, g.nchunks, "{}", g.file);
        assert_eq!(p.nchannels(), g.nchannels, "{}", g.file);
        assert_eq!((p.min_bytes, p.max_bytes), g.bytes, "{}", g.file);
        assert_eq!((p.inplace, p.outofplace), g.modes, "{}", g.file);
        assert_eq!(text.matches("<step ").count(), g.xml_steps, "{}", g.file);
        for gpu in &p.gpus {
            assert_eq!(
                gpu.threadblocks.len(),
                g.blocks,
                "{} rank {}",
                g.file,
                gpu.rank
            );
            assert_eq!(
                gpu.scratch_chunks, g.scratch,
                "{} rank {}",
                g.file, gpu.rank
            );
        }
        assert_eq!(
            xml::transmissions(&p),
            vec![g.transmissions; g.ngpus],
            "{}",
            g.file
        );
        assert!(
            p.steps().all(|(_, s)| s.op != Op::Nop),
            "nops fold into deps"
        );
    }
}

#[test]
#[cfg_attr(not(has_shared_fixtures), ignore = "needs ../shared/fixtures")]
fn fixture_dependencies_fold_from_nops() {
    let (_, p) = load(&GOLDEN[0]);
    // rank 0 tb 0: nop(2,0), nop(2,1), re dep(1,1), re -> in memory: re with 3 deps, re.
    let tb0 = &p.gpus[0].threadblocks[0];
    assert_eq!(tb0.steps.len(), 2);
    let deps: Vec<(usize, usize)> = tb0.steps[0].deps.iter().map(|d| (d.tb, d.step)).collect();
    assert_eq!(deps, vec![(1, 1), (2, 0), (2, 1)]);
    // tb 1: s, r, nop(2,1), re dep(2,0), re -> deps remapped to in-memory indices.
    let tb1 = &p.gpus[0].threadblocks[1];
    assert_eq!(tb1.steps.len(), 4);
    let deps: Vec<(usize, usize)> = tb1.steps[2].deps.iter().map(|d| (d.tb, d.step)).collect();
    assert_eq!(deps, vec![(2, 0), (2, 1)]);
}

#[test]
#[cfg_attr(not(has_shared_fixtures), ignore = "needs ../shared/fixtures")]
fn fixtures_verify() {
    for g in &GOLDEN {
        let (_, p) = load(g);
        verify::verify(&p).unwrap_or_else(|e| panic!("{}: {e}", g.file));
    }
}

#[test]
#[cfg_attr(not(has_shared_fixtures), ignore = "needs ../shared/fixtures")]
fn fixtures_run_correctly_on_cpu() {
    for g in &GOLDEN {
        let (_, p) = load(g);
        assert_runs_correctly(&p);
    }
}

#[test]
#[cfg_attr(not(has_shared_fixtures), ignore = "needs ../shared/fixtures")]
fn msccl_tools_fixtures_write_back_byte_for_byte() {
    for g in &GOLDEN[..2] {
        let (text, p) = load(g);
        let out = xml::write(&p, Flavor::Nccl).unwrap();
        assert_eq!(out, text, "{}", g.file);
    }
}

#[test]
#[cfg_attr(not(has_shared_fixtures), ignore = "needs ../shared/fixtures")]
fn fixtures_round_trip_in_every_legal_flavour() {
    for g in &GOLDEN {
        let (_, p) = load(g);
        let mut normalized = p.clone();
        normalized.normalize_transfer_fields();
        let fused = p.steps().any(|(_, s)| s.op.is_fused());
        for flavor in Flavor::ALL {
            let written = xml::write(&p, flavor);
            if flavor == Flavor::Rccl && fused {
                let e = written.expect_err("RCCL refuses fused ops");
                assert!(e.to_string().contains("refused by RCCL"), "{e}");
                continue;
            }
            let text = written.unwrap_or_else(|e| panic!("{} {flavor:?}: {e}", g.file));
            let back =
                xml::read_str(&text).unwrap_or_else(|e| panic!("{} {flavor:?}: {e}", g.file));
            let mut expect = normalized.clone();
            if flavor == Flavor::Legacy {
                expect.max_bytes = xml::legacy_max_bytes(&p).unwrap();
            }
            assert_eq!(back, expect, "{} {flavor:?}", g.file);
        }
    }
}

#[test]
#[cfg_attr(not(has_shared_fixtures), ignore = "needs ../shared/fixtures")]
fn rccl_alltoall_receives_are_normalized_to_the_senders_slot() {
    let (_, p) = load(&GOLDEN[2]);
    // The shipped file writes srcoff=0 on every r; the writer names the sender's slot.
    let text = xml::write(&p, Flavor::Rccl).unwrap();
    let back = xml::read_str(&text).unwrap();
    let r = &back.gpus[0].threadblocks[1].steps[0];
    assert_eq!((r.op, r.src.offset, r.dst.offset), (Op::Recv, 0, 1));
    let r = &back.gpus[3].threadblocks[1].steps[0];
    // rank 3 tb 1 receives from rank 0 (which sends its i[3]) into o[0].
    assert_eq!((r.op, r.src.offset, r.dst.offset), (Op::Recv, 3, 0));
}

#[test]
#[cfg_attr(not(has_shared_fixtures), ignore = "needs ../shared/fixtures")]
fn json_round_trip() {
    for g in &GOLDEN {
        let (_, p) = load(g);
        assert_eq!(Program::from_json(&p.to_json()).unwrap(), p);
    }
}
