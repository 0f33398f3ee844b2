//! Negative reader tests, one per runtime rule: each mutates a valid file and checks the
//! error's wording, line, element and attribute.

use runtime::builders::direct_allgather;
use runtime::ir::Flavor;
use runtime::xml::{self, XmlError};

/// A valid 2-rank file: per rank, tb 0 = local cpy, tb 1 = s then r with the peer.
fn base() -> String {
    xml::write(&direct_allgather(2), Flavor::Nccl).unwrap()
}

fn replace_first(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not in base");
    text.replacen(from, to, 1)
}

fn error(text: &str) -> XmlError {
    match xml::read_str(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    }
}

fn assert_error(e: &XmlError, line: usize, element: &str, attribute: Option<&str>, message: &str) {
    assert!(
        e.message.contains(message),
        "message {:?} lacks {message:?}",
        e.message
    );
    assert_eq!(e.line, line, "{e}");
    assert_eq!(e.element, element, "{e}");
    assert_eq!(e.attribute.as_deref(), attribute, "{e}");
}

#[test]
fn base_is_valid() {
    let text = base();
    assert!(text.starts_with("<algo name=\"direct_allgather_2r\" proto=\"Simple\" nchannels=\"1\""));
    assert_eq!(xml::read_str(&text).unwrap().ngpus, 2);
}

#[test]
fn xml_declaration_is_rejected() {
    let e = error(&format!("<?xml version=\"1.0\"?>\n{}", base()));
    assert_error(&e, 1, "?xml", None, "XML Parse : expected >, got '?'");
}

#[test]
fn tab_indent_is_rejected() {
    let e = error(&replace_first(&base(), "    <tb", "\t<tb"));
    assert_error(
        &e,
        3,
        "",
        None,
        "XML Parse error : expecting '<', got '\\t'",
    );
}

#[test]
fn octal_and_hex_numbers_are_rejected() {
    let e = error(&replace_first(
        &base(),
        "nchunksperloop=\"2\"",
        "nchunksperloop=\"02\"",
    ));
    assert_error(
        &e,
        1,
        "algo",
        Some("nchunksperloop"),
        "not a plain decimal integer (strtol reads a leading 0 as octal: 2)",
    );
    let e = error(&replace_first(
        &base(),
        "s_chunks=\"0\"",
        "s_chunks=\"010\"",
    ));
    assert_error(&e, 2, "gpu", Some("s_chunks"), "octal: 8");
    let e = error(&replace_first(&base(), "ngpus=\"2\"", "ngpus=\"0x2\""));
    assert_error(&e, 1, "algo", Some("ngpus"), "hexadecimal 2");
    let e = error(&replace_first(&base(), "cnt=\"1\"", "cnt=\"+1\""));
    assert_error(&e, 4, "step", Some("cnt"), "not a plain decimal integer");
}

#[test]
fn missing_attribute_is_rejected() {
    let e = error(&replace_first(&base(), " hasdep=\"0\"", ""));
    assert_error(
        &e,
        4,
        "step",
        Some("hasdep"),
        "Attribute hasdep of node step not found",
    );
    // Without outofplace only the legacy runtime loads a file, and it never selects one
    // with maxBytes="0": no runtime takes it, and the error says why for each.
    let e = error(&replace_first(&base(), " outofplace=\"1\"", ""));
    assert_error(
        &e,
        1,
        "",
        None,
        "no MSCCL runtime loads this file: nccl (line 1): Attribute outofplace of node algo not found; rccl (line 1): Attribute outofplace of node algo not found; legacy (line 1): maxBytes=\"0\"",
    );
    assert!(e.to_string().len() <= 300, "{e}");
}

#[test]
fn channel_not_below_nchannels_is_rejected() {
    let e = error(&replace_first(&base(), "chan=\"0\"", "chan=\"1\""));
    assert_error(&e, 3, "tb", Some("chan"), "chan 1 is not below nchannels 1");
}

#[test]
fn gap_in_threadblock_ids_is_rejected() {
    let e = error(&replace_first(&base(), "<tb id=\"1\"", "<tb id=\"2\""));
    assert_error(&e, 2, "gpu", Some("id"), "MSCCL: thread block 1 is missing");
    let e = error(&replace_first(&base(), "<tb id=\"1\"", "<tb id=\"0\""));
    assert_error(&e, 6, "tb", Some("id"), "duplicate thread block id 0");
}

#[test]
fn steps_out_of_order_are_rejected() {
    let e = error(&replace_first(&base(), "<step s=\"1\"", "<step s=\"2\""));
    assert_error(
        &e,
        8,
        "step",
        Some("s"),
        "step s=\"2\" is out of order: expected 1",
    );
}

#[test]
fn dependency_on_step_without_hasdep_is_rejected() {
    // rank 0's cpy waits on tb 1 step 0 (the send), which lacks hasdep="1".
    let cpy = "type=\"cpy\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"0\" cnt=\"1\" depid=\"-1\" deps=\"-1\"";
    let dep = "type=\"cpy\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"0\" cnt=\"1\" depid=\"1\" deps=\"0\"";
    let text = replace_first(&base(), cpy, dep);
    let e = error(&text);
    assert_error(
        &e,
        4,
        "step",
        Some("deps"),
        "depends on thread block 1 step 0 which does not have hasdep=\"1\"",
    );
    // With hasdep on the target it reads, and the dependency is kept.
    let send = "type=\"s\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"0\" cnt=\"1\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"";
    let fixed = replace_first(&text, send, &send.replace("hasdep=\"0\"", "hasdep=\"1\""));
    let p = xml::read_str(&fixed).unwrap();
    assert_eq!(p.gpus[0].threadblocks[0].steps[0].deps.len(), 1);
}

#[test]
fn lexical_traps_are_rejected() {
    let e = error(&replace_first(
        &base(),
        "proto=\"Simple\"",
        "proto='Simple'",
    ));
    assert!(e.message.contains("XML Parse : expected >, got"), "{e}");
    let e = error(&replace_first(&base(), " proto=", "\nproto="));
    assert_error(&e, 2, "algo", None, "XML Parse : expected >, got '\\n'");
    let e = error(&replace_first(&base(), "</tb>", "</gpu>"));
    assert!(e.message.contains("XML Mismatch : tb / gpu"), "{e}");
    let e = error(&replace_first(&base(), "proto=\"Simple\"", "proto=Simple"));
    assert!(
        e.message.contains("XML Parse : Expected (double) quote."),
        "{e}"
    );
    let extra: String = (0..7).map(|i| format!(" x{i}=\"0\"")).collect();
    let e = error(&replace_first(
        &base(),
        " maxBytes=\"0\"",
        &format!(" maxBytes=\"0\"{extra}"),
    ));
    assert_error(&e, 1, "algo", Some("x6"), "more than 16 attributes");
    let e = error(&base()[..200]);
    assert!(e.message.contains("XML Parse : Unexpected EOF"), "{e}");
}

#[test]
fn comments_are_skipped() {
    let text = format!("<!-- a -->\n<!-- b\n c -->\n{}<!-- end -->\n", base());
    assert_eq!(
        xml::read_str(&text).unwrap(),
        xml::read_str(&base()).unwrap()
    );
}

#[test]
fn runtime_step_checks() {
    let b = base();
    let e = error(&replace_first(&b, "type=\"cpy\"", "type=\"copy\""));
    assert_error(
        &e,
        4,
        "step",
        Some("type"),
        "MSCCL: type of transfer is not supported: copy",
    );
    let e = error(&replace_first(&b, "srcbuf=\"i\"", "srcbuf=\"x\""));
    assert_error(
        &e,
        4,
        "step",
        Some("srcbuf"),
        "MSCCL: type of buffer is not supported: x",
    );
    let e = error(&replace_first(&b, "cnt=\"1\"", "cnt=\"72\""));
    assert_error(
        &e,
        4,
        "step",
        Some("cnt"),
        "count (72) must be positive and less than 72",
    );
    let e = error(&replace_first(&b, "hasdep=\"0\"", "hasdep=\"2\""));
    assert_error(
        &e,
        4,
        "step",
        Some("hasdep"),
        "hasDependence needs to be 0 or 1",
    );
    let e = error(&replace_first(
        &b,
        "<tb id=\"1\" send=\"1\"",
        "<tb id=\"1\" send=\"-1\"",
    ));
    assert_error(
        &e,
        7,
        "step",
        Some("type"),
        "there is a send in thread block 1 on GPU 0 without a sendPeer.",
    );
    let e = error(&replace_first(
        &b,
        "srcoff=\"0\" dstbuf=\"o\" dstoff=\"0\"",
        "srcoff=\"1\" dstbuf=\"o\" dstoff=\"0\"",
    ));
    assert_error(
        &e,
        4,
        "step",
        Some("srcoff"),
        "Incorrect offset set for input buffer: offset: 1 maximum allowed: 1",
    );
    let e = error(&replace_first(&b, "proto=\"Simple\"", "proto=\"simple\""));
    assert_error(
        &e,
        1,
        "algo",
        Some("proto"),
        "MSCCL: protocol simple is not supported.",
    );
    let e = error(&replace_first(
        &b,
        "coll=\"allgather\"",
        "coll=\"allgatherv\"",
    ));
    assert_error(
        &e,
        1,
        "algo",
        Some("coll"),
        "MSCCL: unsupported collective: allgatherv",
    );
    // `custom` loads only on the legacy runtime, which refuses an i_chunks other than 0 or
    // nchunksperloop (and never selects maxBytes="0").
    let e = error(&replace_first(&b, "coll=\"allgather\"", "coll=\"custom\""));
    assert_error(
        &e,
        1,
        "",
        None,
        "no MSCCL runtime loads this file: nccl (line 1): MSCCL: unsupported collective: custom",
    );
    let e = error(&replace_first(&b, "s_chunks=\"0\"", "s_chunks=\"-1\""));
    assert_error(
        &e,
        2,
        "gpu",
        Some("s_chunks"),
        "MSCCL: nScratchChunks must be not negative.",
    );
}

#[test]
fn checks_the_runtime_leaves_out() {
    let b = base();
    // peer == own rank, peer >= ngpus
    let e = error(&replace_first(
        &b,
        "<tb id=\"1\" send=\"1\"",
        "<tb id=\"1\" send=\"0\"",
    ));
    assert_error(&e, 6, "tb", Some("send"), "send=0 is the GPU's own rank");
    let e = error(&replace_first(
        &b,
        "<tb id=\"1\" send=\"1\"",
        "<tb id=\"1\" send=\"5\"",
    ));
    assert_error(&e, 6, "tb", Some("send"), "send=5 is not a rank (ngpus 2)");
    // i_chunks vs nchunksperloop: only the legacy runtime checks it.
    let (_, dialect) =
        xml::read_str_dialect(&replace_first(&b, "i_chunks=\"1\"", "i_chunks=\"2\"")).unwrap();
    assert_eq!(dialect.accepting(), vec![Flavor::Nccl, Flavor::Rccl]);
    let legacy = dialect.refusal(Flavor::Legacy).unwrap();
    assert_eq!(legacy.line, 1, "maxBytes=0 comes first");
    assert_eq!(legacy.more, 1, "and the inconsistency");
    // off + cnt beyond the extent
    let e = error(&replace_first(
        &b,
        "dstoff=\"0\" cnt=\"1\"",
        "dstoff=\"0\" cnt=\"3\"",
    ));
    assert_error(
        &e,
        4,
        "step",
        Some("cnt"),
        "offset 0 + cnt 3 exceeds the 1 chunks of the input buffer",
    );
    // two tbs on one (channel, peer, direction)
    let e = error(&replace_first(
        &b,
        "<tb id=\"0\" send=\"-1\" recv=\"-1\"",
        "<tb id=\"0\" send=\"1\" recv=\"-1\"",
    ));
    assert_error(
        &e,
        6,
        "tb",
        Some("send"),
        "thread block 0 already sends to rank 1 on channel 0",
    );
    // depid names its own tb / a missing tb
    let cpy = "dstoff=\"0\" cnt=\"1\" depid=\"-1\" deps=\"-1\"";
    let e = error(&replace_first(
        &b,
        cpy,
        "dstoff=\"0\" cnt=\"1\" depid=\"0\" deps=\"0\"",
    ));
    assert_error(
        &e,
        4,
        "step",
        Some("depid"),
        "depid 0 names its own thread block",
    );
    let e = error(&replace_first(
        &b,
        cpy,
        "dstoff=\"0\" cnt=\"1\" depid=\"7\" deps=\"0\"",
    ));
    assert_error(
        &e,
        4,
        "step",
        Some("depid"),
        "depid 7 is not a thread block of GPU 0",
    );
    let e = error(&replace_first(
        &b,
        cpy,
        "dstoff=\"0\" cnt=\"1\" depid=\"1\" deps=\"5\"",
    ));
    assert_error(
        &e,
        4,
        "step",
        Some("deps"),
        "deps 5 is beyond the 2 steps of thread block 1",
    );
}

#[test]
fn nop_chain_must_end_in_a_dependent_step() {
    let nop = "      <step s=\"0\" type=\"nop\" srcbuf=\"i\" srcoff=\"-1\" dstbuf=\"o\" dstoff=\"-1\" cnt=\"0\" depid=\"1\" deps=\"0\" hasdep=\"0\"/>\n";
    let b = base();
    let cpy_line = b.lines().nth(3).unwrap().to_string();
    let renumbered = cpy_line.replace("s=\"0\"", "s=\"1\"");
    let text = replace_first(
        &b,
        &format!("{cpy_line}\n"),
        &format!("{nop}{renumbered}\n"),
    );
    let e = error(&text);
    assert_error(&e, 5, "step", Some("depid"), "when there is a chain of dependencies, the last reduction must be a part of the first immediate instruction");
}

#[test]
fn reduce_chain_counts_must_match() {
    use runtime::ir::{Buffer, Op, Slot, Step};
    let mut p = runtime::builders::ring_allreduce(&[0, 1], 1, false);
    p.gpus[0].scratch_chunks = 2;
    // Two fusable re steps (same dst, same src buffer) with different counts.
    let tb = &mut p.gpus[0].threadblocks[0];
    let re = |off, count| {
        Step::new(
            Op::Reduce,
            Slot::new(Buffer::Input, off),
            Slot::new(Buffer::Scratch, 0),
            count,
        )
    };
    tb.steps.push(re(0, 1));
    tb.steps.push(re(0, 2));
    let e = xml::write(&p, Flavor::Nccl).unwrap_err();
    assert!(
        e.to_string()
            .contains("re fuses with the previous re but their counts differ"),
        "{e}"
    );
    // The reader applies the same rule to files.
    p.gpus[0].threadblocks[0].steps.last_mut().unwrap().count = 1;
    let text = xml::write(&p, Flavor::Nccl).unwrap();
    let needle = "type=\"re\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"s\" dstoff=\"0\" cnt=\"1\"";
    let last = text.rfind(needle).unwrap();
    let mutated = format!(
        "{}{}",
        &text[..last],
        text[last..].replacen("cnt=\"1\"", "cnt=\"2\"", 1)
    );
    let e = error(&mutated);
    assert!(
        e.message
            .contains("fuses with the previous re (cnt 1) but has cnt 2"),
        "{e}"
    );
}

#[test]
fn unreadable_file_names_the_runtime_message() {
    let e = xml::read_file("/nonexistent/algo.xml").unwrap_err();
    assert!(
        e.message
            .contains("Could not open MSCCL XML algorithm file"),
        "{e}"
    );
}

/// A 2-rank allgather whose rank 0 has one local threadblock per entry of `steps`, each of
/// that many copies (rank 1 has no threadblocks): 3 + Σ (1 + steps) elements load for rank 0.
fn local_copies(steps: &[usize]) -> String {
    let mut text = String::from(
        "<algo name=\"x\" proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"2\" ngpus=\"2\" coll=\"allgather\" inplace=\"0\" outofplace=\"1\" minBytes=\"0\" maxBytes=\"1048576\">\n  <gpu id=\"0\" i_chunks=\"1\" o_chunks=\"2\" s_chunks=\"0\">\n",
    );
    for (t, &n) in steps.iter().enumerate() {
        text += &format!("    <tb id=\"{t}\" send=\"-1\" recv=\"-1\" chan=\"0\">\n");
        for s in 0..n {
            text += &format!("      <step s=\"{s}\" type=\"cpy\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"0\" cnt=\"1\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>\n");
        }
        text += "    </tb>\n";
    }
    text + "  </gpu>\n  <gpu id=\"1\" i_chunks=\"0\" o_chunks=\"0\" s_chunks=\"0\">\n  </gpu>\n</algo>\n"
}

/// Issue 31, item 4: the runtimes' parser holds at most 4,095 elements for the rank it loads
/// (the algo, every gpu, that rank's tbs and steps); one more and it refuses the file.
#[test]
fn a_rank_with_more_elements_than_the_parser_holds_is_rejected() {
    // 1 algo + 2 gpus + 31 tbs + 31 × 131 steps = 4095.
    let mut steps = vec![131; 31];
    let fits = xml::read_str(&local_copies(&steps)).expect("4095 elements load");
    steps[30] += 1;
    let e = error(&local_copies(&steps));
    assert_error(
        &e,
        2,
        "gpu",
        None,
        "XML parser is limited to 1024 nodes (MAX_NODES 4096): loading rank 0 holds 4096 elements",
    );
    // The writer refuses the same program, with a typed reason.
    let mut over = fits;
    let tb = &mut over.gpus[0].threadblocks[30];
    tb.steps.push(tb.steps[0].clone());
    let e = xml::writable(&over, Flavor::Legacy).unwrap_err();
    assert_eq!(
        e.problem,
        xml::WriteProblem::TooManyElements {
            rank: 0,
            elements: 4096,
            limit: 4095
        }
    );
}

/// Rank 0 of a 34-rank allgather receives (or sends) its chunk from (to) ranks 1..=n, one
/// threadblock each, all on channel 0.
fn fan(n: usize, send: bool) -> String {
    let mut text = String::from(
        "<algo name=\"x\" proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"34\" ngpus=\"34\" coll=\"allgather\" inplace=\"0\" outofplace=\"1\" minBytes=\"0\" maxBytes=\"0\">\n  <gpu id=\"0\" i_chunks=\"1\" o_chunks=\"34\" s_chunks=\"0\">\n",
    );
    for p in 1..=n {
        let (to, from, ty, off): (i64, i64, &str, usize) = if send {
            (p as i64, -1, "s", 0)
        } else {
            (-1, p as i64, "r", p)
        };
        let (buf, t) = if send { ("i", p - 1) } else { ("o", p - 1) };
        text += &format!("    <tb id=\"{t}\" send=\"{to}\" recv=\"{from}\" chan=\"0\">\n");
        text += &format!("      <step s=\"0\" type=\"{ty}\" srcbuf=\"{buf}\" srcoff=\"{off}\" dstbuf=\"{buf}\" dstoff=\"{off}\" cnt=\"1\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>\n    </tb>\n");
    }
    text + "  </gpu>\n</algo>\n"
}

/// Issue 31, item 3: at most 32 threadblocks of a rank have a receive peer (or a send peer)
/// on one channel; the 33rd makes the runtimes refuse the file.
#[test]
fn more_than_32_peer_threadblocks_on_one_channel_are_rejected() {
    for (send, words) in [
        (false, "too many recvs per channel. Max allowed 32"),
        (true, "too many sends per channel. Max allowed 32"),
    ] {
        let fits = xml::read_str(&fan(32, send)).expect("32 threadblocks per channel load");
        let e = error(&fan(33, send));
        let key = if send { "send" } else { "recv" };
        assert_error(&e, 99, "tb", Some(key), words);
        assert!(e.message.contains("thread block 32 is number 33"), "{e}");
        // The writer refuses one more, with a typed reason.
        let mut over = fits;
        let mut extra = over.gpus[0].threadblocks[0].clone();
        if send {
            extra.send = Some(33);
        } else {
            extra.recv = Some(33);
        }
        over.gpus[0].threadblocks.push(extra);
        let e = xml::writable(&over, Flavor::Nccl).unwrap_err();
        assert_eq!(
            e.problem,
            xml::WriteProblem::TooManyChannelPeers {
                rank: 0,
                channel: 0,
                send,
                count: 33,
                limit: 32
            }
        );
    }
}
