//! Regression tests for absurd inputs (issue 12): each is rejected with a one-line error before
//! anything large is allocated, and nothing recurses without bound.

use runtime::builders::direct_allgather;
use runtime::cpu::{self, DataType, RunOptions};
use runtime::ir::Flavor;
use runtime::verify::verify;
use runtime::xml::{self, XmlError};

/// A valid 2-rank file.
fn base() -> String {
    xml::write(&direct_allgather(2), Flavor::Nccl).unwrap()
}

fn error(text: &str) -> XmlError {
    match xml::read_str(text) {
        Ok(_) => panic!("accepted"),
        Err(e) => e,
    }
}

fn assert_one_line(e: &impl std::fmt::Display) {
    assert!(!e.to_string().contains('\n'), "not one line: {e}");
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let depth = 30_000;
    let text = "<a>".repeat(depth) + &"</a>".repeat(depth);
    let e = error(&text);
    assert!(e.message.contains("nested deeper than 16 levels"), "{e}");
    assert_one_line(&e);
}

#[test]
fn many_comments_do_not_overflow_the_stack() {
    let comments = "<!---->".repeat(20_000);
    let text = format!("{comments}\n{}{comments}", base());
    assert!(text.len() > 140_000);
    assert_eq!(xml::read_str(&text).unwrap().ngpus, 2);
}

#[test]
fn duplicate_attributes_are_rejected() {
    let text = base().replacen("proto=\"Simple\"", "proto=\"Simple\" proto=\"LL\"", 1);
    let e = error(&text);
    assert_eq!((e.line, e.attribute.as_deref()), (1, Some("proto")), "{e}");
    assert!(e.message.contains("duplicate attribute"), "{e}");
    let text = base().replacen("srcbuf=\"i\"", "srcbuf=\"i\" srcbuf=\"o\"", 1);
    let e = error(&text);
    assert_eq!(e.attribute.as_deref(), Some("srcbuf"), "{e}");
    assert!(e.line > 1, "{e}");
}

#[test]
fn huge_ngpus_is_rejected_before_allocating() {
    let text = base().replacen("ngpus=\"2\"", "ngpus=\"2147483647\"", 1);
    let e = error(&text);
    assert_eq!(e.attribute.as_deref(), Some("ngpus"), "{e}");
    assert!(e.message.contains("between 1 and 4096"), "{e}");
}

#[test]
fn huge_chunk_counts_are_rejected() {
    let text = base().replacen("nchunksperloop=\"2\"", "nchunksperloop=\"2147483646\"", 1);
    let e = error(&text);
    assert_eq!(e.attribute.as_deref(), Some("nchunksperloop"), "{e}");
    let text = base().replacen("s_chunks=\"0\"", "s_chunks=\"9223372036854775807\"", 1);
    let e = error(&text);
    assert_eq!(e.attribute.as_deref(), Some("s_chunks"), "{e}");
    assert!(e.message.contains("at most 32768 chunks"), "{e}");
}

#[test]
fn verify_rejects_a_program_too_large_to_execute_symbolically() {
    // A program from JSON is bounded by no reader: 2^40 chunks per loop.
    let mut p = direct_allgather(2);
    p.nchunksperloop = 1 << 40;
    for g in &mut p.gpus {
        g.input_chunks = 1 << 39;
        g.output_chunks = 1 << 40;
    }
    let e = verify(&p).unwrap_err().to_string();
    assert!(e.contains("too large to verify"), "{e}");
    assert_one_line(&e);
}

#[test]
fn run_rejects_buffers_beyond_the_memory_limit() {
    let p = direct_allgather(2);
    let opts = RunOptions::for_bytes(&p, 16 << 30, DataType::F32);
    let e = format!("{:#}", cpu::run(&p, &opts).unwrap_err());
    assert!(e.contains("limit 4096 MiB"), "{e}");
    assert_one_line(&e);
}

#[test]
fn offset_plus_count_overflow_is_an_error() {
    // Found by the fuzz target `program_json`: a program from JSON with offset usize::MAX.
    let mut p = direct_allgather(2);
    p.gpus[0].threadblocks[0].steps[0].src.offset = usize::MAX;
    let e = verify(&p).unwrap_err().to_string();
    assert!(e.contains("out of bounds"), "{e}");
    assert_one_line(&e);
}

#[test]
fn errors_quoting_a_value_with_a_line_break_stay_one_line() {
    // Found by the fuzz target `msccl_xml`.
    let text = base().replacen("dstbuf=\"o\"", "dstbuf=\"\no\"", 1);
    let e = error(&text);
    assert_eq!(e.attribute.as_deref(), Some("dstbuf"), "{e}");
    assert_one_line(&e);
}
