//! Negative verifier tests: each breaks a correct program in one way and checks the error.

mod common;

use runtime::builders::{direct_allgather, direct_alltoall, ring_allgather, ring_allreduce};
use runtime::ir::{Buffer, Dep, Op, Program, Slot, Step, Threadblock};
use runtime::verify::{verify, verify_with, VerifyError, VerifyOptions};
use runtime::xml;

fn message(p: &Program) -> String {
    match verify(p) {
        Ok(()) => panic!("{} verified but should not", p.name),
        Err(e) => e.to_string(),
    }
}

fn assert_message(p: &Program, want: &str) {
    let m = message(p);
    assert!(m.contains(want), "{m:?} lacks {want:?}");
}

#[test]
fn mismatched_send_receive_counts() {
    let mut p = ring_allgather(&[0, 1], 2, false);
    // rank 0, channel 0: send two chunks where the receiver takes one.
    let s = &mut p.gpus[0].threadblocks[0].steps[1];
    assert_eq!(s.op, Op::Send);
    s.count = 2;
    assert_message(&p, "out-of-place: mismatched send/receive counts on 0->1 channel 0: rank 0 tb 0 step 1 sends 2 chunks but rank 1 tb 0 step 2 receives 1");
}

#[test]
fn deadlock_when_both_sides_receive_first() {
    let mut p = direct_alltoall(2);
    for g in &mut p.gpus {
        g.threadblocks[1].steps.swap(0, 1);
    }
    // One line: the first blocked threadblock and a count; the detail lists them all.
    assert_message(&p, "out-of-place: deadlock: rank 0 tb 1 step 0 (r) waits to receive from rank 1 on channel 0; 1 more threadblocks blocked (all listed with --verbose or in --json)");
    let e = verify(&p).unwrap_err();
    assert_eq!(
        e.detail(),
        [
            "rank 0 tb 1 step 0 (r) waits to receive from rank 1 on channel 0",
            "rank 1 tb 1 step 0 (r) waits to receive from rank 0 on channel 0"
        ]
    );
}

#[test]
fn deadlock_through_a_dependency_cycle() {
    let mut p = direct_alltoall(2);
    // rank 0: the cpy waits for the receive, the send waits for the cpy -> receive never comes
    // from rank 1 if rank 1 does the same.
    for g in &mut p.gpus {
        g.threadblocks[0].steps[0].deps.push(Dep { tb: 1, step: 1 });
        g.threadblocks[1].steps[0].deps.push(Dep { tb: 0, step: 0 });
    }
    assert_message(&p, "rank 0 tb 0 step 0 (cpy) waits for tb 1 step 1");
}

#[test]
fn deadlock_reports_a_full_fifo() {
    // Rank 0 sends three messages before receiving; rank 1 receives only after sending three.
    let mut p = ring_allgather(&[0, 1], 3, false);
    for g in &mut p.gpus {
        let tbs: Vec<Threadblock> = g.threadblocks.drain(..).collect();
        let mut merged = tbs[0].clone();
        merged.steps.clear();
        // all sends of all channels first, then all receives, on channel 0
        for tb in &tbs {
            merged
                .steps
                .extend(tb.steps.iter().filter(|s| s.op != Op::Recv).cloned());
        }
        for tb in &tbs {
            merged
                .steps
                .extend(tb.steps.iter().filter(|s| s.op == Op::Recv).cloned());
        }
        g.threadblocks.push(merged);
    }
    assert!(verify_with(&p, &VerifyOptions { fifo_depth: 3 }).is_ok());
    assert_message(&p, "waits for room to send to rank 1 on channel 0");
}

#[test]
fn race_between_unordered_writes() {
    let mut p = direct_alltoall(2);
    // rank 0's local copy now writes o[1], which the receive from rank 1 also writes.
    p.gpus[0].threadblocks[0].steps[0].dst.offset = 1;
    assert_message(&p, "out-of-place: race on rank 0 Recv[1]: rank 0 tb 0 step 0 (write) and rank 0 tb 1 step 1 (write) are unordered");
    // A dependency orders them: no race any more, but the postcondition fails.
    p.gpus[0].threadblocks[0].steps[0]
        .deps
        .push(Dep { tb: 1, step: 1 });
    assert_message(&p, "out-of-place: rank 0 output chunk 0: never written");
}

#[test]
#[cfg_attr(not(has_shared_fixtures), ignore = "needs ../shared/fixtures")]
fn race_found_in_fixture_without_its_write_after_read_dependency() {
    let text = common::required_fixture("allreduce-1step-3gpu-LL-inplace.xml");
    let mut p = xml::read_str(&text).unwrap();
    // rank 0 tb 0's first re (writes i[0]) must wait for tb 2's send of i[0..3). Its
    // dependency on tb 2 step 0 alone is redundant (tb 2 step 1 comes later and is also
    // waited for), so the verifier accepts dropping just that one...
    let deps = &mut p.gpus[0].threadblocks[0].steps[0].deps;
    deps.retain(|d| !(d.tb == 2 && d.step == 0));
    assert!(verify(&p).is_ok());
    // ...but not dropping both dependencies on tb 2.
    let deps = &mut p.gpus[0].threadblocks[0].steps[0].deps;
    deps.retain(|d| d.tb != 2);
    assert_message(&p, "in-place: race on rank 0 Recv[0]: rank 0 tb 2 step 0 (read) and rank 0 tb 0 step 0 (write) are unordered");
}

#[test]
fn race_through_in_place_aliasing() {
    // Out of place, direct allgather is race-free. In place, rank r's input i[0] is o[r]:
    // the local copy i[0] -> o[r] writes the slot that the per-peer send reads, unordered.
    let mut p = direct_allgather(2);
    assert!(verify(&p).is_ok());
    p.inplace = true;
    p.outofplace = false;
    assert_message(&p, "in-place: race on rank 0 Recv[0]: rank 0 tb 0 step 0 (write) and rank 0 tb 1 step 0 (read) are unordered");
}

#[test]
fn unmatched_send() {
    let mut p = ring_allgather(&[0, 1, 2], 1, true);
    assert!(verify(&p).is_ok());
    // Rank 0 sends one message more than rank 1 receives.
    let extra = p.gpus[0].threadblocks[0].steps[0].clone();
    p.gpus[0].threadblocks[0].steps.push(extra);
    assert_message(&p, "in-place: unmatched send: 1 message(s) from rank 0 tb 0 step 4 on 0->1 channel 0 are never received");
}

#[test]
fn double_counted_contribution() {
    let mut p = ring_allreduce(&[0, 1], 1, false);
    // An extra re of the own input chunk into the partial sum.
    let tb = &mut p.gpus[0].threadblocks[0];
    let pos = tb.steps.iter().position(|s| s.op == Op::Reduce).unwrap();
    let extra = tb.steps[pos].clone();
    tb.steps.insert(pos, extra);
    assert_message(&p, "double-counts (rank 0, chunk 0) in s[0]");
}

#[test]
fn missing_contribution() {
    let mut p = ring_allreduce(&[0, 1, 2], 1, false);
    // Drop rank 1's first local reduction: one contribution never reaches the result.
    let tb = &mut p.gpus[1].threadblocks[0];
    let pos = tb.steps.iter().position(|s| s.op == Op::Reduce).unwrap();
    tb.steps.remove(pos);
    assert_message(&p, "missing contribution (rank 1, chunk");
}

#[test]
fn undefined_data_is_reported() {
    let mut p = direct_allgather(2);
    // Send the output slot that nothing has written yet.
    p.gpus[0].threadblocks[1].steps[0].src = Slot::new(Buffer::Output, 1);
    assert_message(
        &p,
        "out-of-place: rank 0 tb 1 step 0 reads undefined data in o[1]",
    );
}

#[test]
fn out_of_bounds_and_structure() {
    let mut p = direct_allgather(2);
    p.gpus[0].threadblocks[0].steps[0].dst.offset = 2;
    assert_message(
        &p,
        "rank 0 tb 0 step 0: o[2] with count 1 is out of bounds (o has 2 chunks)",
    );

    let mut p = direct_allgather(2);
    p.gpus[0].threadblocks[0].send = Some(1);
    assert_message(&p, "rank 0 tb 1: tb 0 already sends to rank 1 on channel 0");

    let mut p = direct_allgather(2);
    p.gpus[0].threadblocks[0].steps[0]
        .deps
        .push(Dep { tb: 0, step: 0 });
    assert_message(&p, "rank 0 tb 0 step 0: depends on its own threadblock");

    let mut p = direct_allgather(2);
    p.gpus[0].threadblocks[0].steps.push(Step::new(
        Op::Send,
        Slot::new(Buffer::Input, 0),
        Slot::new(Buffer::Output, 0),
        1,
    ));
    assert_message(
        &p,
        "rank 0 tb 0 step 1: s in a threadblock without a send peer",
    );

    let mut p = direct_allgather(2);
    p.gpus[1].input_chunks = 2;
    assert_message(&p, "malformed program: rank 1 declares 2 i chunks");

    let p = direct_allgather(2);
    let mut q = p.clone();
    q.nchunksperloop = 3;
    assert!(matches!(verify(&q), Err(VerifyError::Malformed(_))));
}

#[test]
fn each_declared_mode_is_checked() {
    // A ring allgather built in place uses only o; declared out of place as well, its
    // input chunk is never copied into o[r].
    let mut p = ring_allgather(&[0, 1], 1, true);
    assert!(verify(&p).is_ok());
    p.outofplace = true;
    p.gpus.iter_mut().for_each(|g| g.input_chunks = 0);
    assert_message(
        &p,
        "out-of-place: rank 0 tb 0 step 0 reads undefined data in o[0]",
    );
}
