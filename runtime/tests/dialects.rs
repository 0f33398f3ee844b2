//! The reader takes every MSCCL XML dialect (msccl-tools, microsoft/msccl, msccl-executor-nccl,
//! RCCL): a missing attribute is defaulted as the runtime that accepts the file does, and the
//! [`Dialect`] says which flavours would refuse the file and why. The files are small
//! hand-written ones in each tool's shape.

use runtime::ir::{Collective, Flavor};
use runtime::verify::verify;
use runtime::xml::{self, Dialect, LEGACY_DEFAULT_MAX_BYTES};

/// A 2-rank out-of-place allgather in msccl-tools' shape: lxml's two-space indent, `<algo>`
/// with only name, proto, nchannels, nchunksperloop, ngpus, coll and inplace.
const MSCCL_TOOLS_ALLGATHER: &str = r#"<algo name="ag2" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>"#;

/// A 2-rank in-place reduce-scatter with a fused receive-reduce-copy, written with
/// `{coll}` and `{extra}` attributes on `<algo>`.
fn reduce_scatter(coll: &str, extra: &str) -> String {
    format!(
        r#"<!-- a comment, as shipped files have -->
<algo name="rs2" proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" coll="{coll}" inplace="1"{extra}>
  <gpu id="0" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrc" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"#
    )
}

/// A custom collective as msccl-tools writes it (no synth conditions): rank 0's two input
/// chunks go to rank 1's output; rank 0 declares no output, rank 1 no input.
const MSCCL_TOOLS_CUSTOM: &str = r#"<algo name="tonext" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="custom" inplace="0">
  <gpu id="0" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="1" recv="-1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="2" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="0" o_chunks="2" s_chunks="0">
    <tb id="0" send="-1" recv="0" chan="0">
      <step s="0" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="2" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"#;

fn read(text: &str) -> (runtime::ir::Program, Dialect) {
    xml::read_str_dialect(text).unwrap_or_else(|e| panic!("refused: {e}\n{text}"))
}

#[test]
fn msccl_tools_files_load_with_the_legacy_defaults() {
    let (p, d) = read(MSCCL_TOOLS_ALLGATHER);
    assert_eq!(d.accepting(), vec![Flavor::Legacy]);
    for f in [Flavor::Nccl, Flavor::Rccl] {
        let r = d.refusal(f).unwrap();
        assert_eq!(r.reason, "Attribute outofplace of node algo not found");
        assert_eq!(r.more, 2, "minBytes and maxBytes");
    }
    // Legacy selects the file only for calls whose in-placeness equals `inplace`, from 0
    // bytes up to (not including) 128 MiB.
    assert!(!p.inplace && p.outofplace);
    assert_eq!(
        (p.min_bytes, p.max_bytes),
        (0, LEGACY_DEFAULT_MAX_BYTES - 1)
    );
    let attrs: Vec<&str> = d.defaulted.iter().map(|x| x.attribute.as_str()).collect();
    assert_eq!(attrs, ["algo outofplace", "algo minBytes", "algo maxBytes"]);
    assert!(d.defaulted.iter().all(|x| x.by == Flavor::Legacy));
    verify(&p).unwrap();
}

#[test]
fn an_in_place_msccl_tools_file_is_in_place_only() {
    let text = reduce_scatter("reduce_scatter", "");
    let (p, d) = read(&text);
    assert_eq!(p.collective, Collective::ReduceScatter);
    assert!(p.inplace && !p.outofplace);
    assert_eq!(d.accepting(), vec![Flavor::Legacy]);
    verify(&p).unwrap();
}

#[test]
fn each_flavours_collective_spelling_is_refused_by_the_others() {
    let legacy = reduce_scatter(
        "reduce_scatter",
        r#" outofplace="0" minBytes="0" maxBytes="1024""#,
    );
    let (_, d) = read(&legacy);
    assert_eq!(d.accepting(), vec![Flavor::Legacy]);
    assert_eq!(
        d.refusal(Flavor::Nccl).unwrap().reason,
        "MSCCL: unsupported collective: reduce_scatter"
    );
    let executor = reduce_scatter(
        "reducescatter",
        r#" outofplace="0" minBytes="0" maxBytes="0""#,
    );
    let (p, d) = read(&executor);
    // RCCL would load it but refuses the fused rrc at launch; legacy lacks the spelling.
    assert_eq!(d.accepting(), vec![Flavor::Nccl]);
    assert!(d
        .refusal(Flavor::Rccl)
        .unwrap()
        .reason
        .contains("doesn't support full Ops (step type rrc"));
    assert_eq!(d.refusal(Flavor::Rccl).unwrap().line, 6);
    assert!(d
        .refusal(Flavor::Legacy)
        .unwrap()
        .reason
        .contains("collective type reducescatter is not supported"));
    assert!(d.defaulted.is_empty());
    verify(&p).unwrap();
}

#[test]
fn rccl_unit_test_attributes_are_ignored() {
    // RCCL's unit-test files carry attributes no runtime reads.
    let text = MSCCL_TOOLS_ALLGATHER.replacen(
        r#"inplace="0">"#,
        r#"inplace="0" outofplace="1" minBytes="0" maxBytes="0" maxcount="1" nthreadblocks="2">"#,
        1,
    );
    let (p, d) = read(&text);
    assert_eq!(d.accepting(), vec![Flavor::Nccl, Flavor::Rccl]);
    verify(&p).unwrap();
}

#[test]
fn legacy_nthreads_must_be_a_multiple_of_32() {
    let text =
        MSCCL_TOOLS_ALLGATHER.replacen(r#"inplace="0">"#, r#"inplace="0" nthreads="100">"#, 1);
    let e = xml::read_str(&text).unwrap_err();
    assert!(
        e.message
            .contains("legacy (line 1): MSCCL nthreads must be a multiplication of 32"),
        "{e}"
    );
}

#[test]
fn a_file_no_runtime_loads_names_each_runtimes_reason() {
    // Without `name` the legacy runtime refuses it too.
    let text = MSCCL_TOOLS_ALLGATHER.replacen(r#"name="ag2" "#, "", 1);
    let e = xml::read_str(&text).unwrap_err();
    assert_eq!(e.line, 1);
    assert_eq!(
        e.message,
        "no MSCCL runtime loads this file: legacy (line 1): Attribute name of node algo not found; nccl (line 1): Attribute outofplace of node algo not found; rccl (line 1): Attribute outofplace of node algo not found"
    );
}

#[test]
fn a_custom_collective_without_conditions_is_checked_against_its_declared_layout() {
    let (p, d) = read(MSCCL_TOOLS_CUSTOM);
    assert_eq!(d.accepting(), vec![Flavor::Legacy]);
    assert!(!p.postcondition_known());
    // Everything but the result is checked: the program verifies.
    verify(&p).unwrap();
    // A receive past rank 1's declared output is refused by the bounds check.
    let past = MSCCL_TOOLS_CUSTOM.replacen(
        r#"dstbuf="o" dstoff="0" cnt="2" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>"#,
        r#"dstbuf="o" dstoff="1" cnt="2" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>"#,
        1,
    );
    let e = xml::read_str(&past).unwrap_err();
    assert!(
        e.message
            .contains("offset 1 + cnt 2 exceeds the 2 chunks of the output buffer"),
        "{e}"
    );
    // A send whose receive never comes deadlocks, postcondition or not.
    let lonely = MSCCL_TOOLS_CUSTOM
        .replacen(r#"type="r""#, r#"type="cpy""#, 1)
        .replacen(
            r#"<tb id="0" send="-1" recv="0" chan="0">"#,
            r#"<tb id="0" send="-1" recv="-1" chan="0">"#,
            1,
        );
    let lonely = lonely.replacen(
        r#"srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="2" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>"#,
        r#"srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>"#,
        1,
    );
    let (p, _) = read(&lonely);
    assert!(verify(&p).is_err());
}
