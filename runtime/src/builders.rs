//! Programs built directly, used as baselines and in tests and benchmarks. The ring builders
//! use only `s`, `r`, `re` and `cpy`, so they are legal in every flavour (RCCL included).
//!
//! A ring is given by `order` (a permutation of the ranks): each rank sends to the next rank
//! of `order` and receives from the previous one. With `channels` channels the data is split
//! into `channels` independent rings, one threadblock per rank and channel, so
//! nchunksperloop = n × channels.

use crate::ir::{Buffer, Collective, Gpu, Op, Program, Protocol, Slot, Step, Threadblock};

fn slot(buffer: Buffer, offset: usize) -> Slot {
    Slot::new(buffer, offset)
}

fn send(src: Slot, dst: Slot) -> Step {
    Step::new(Op::Send, src, dst, 1)
}

fn recv(src: Slot, dst: Slot) -> Step {
    Step::new(Op::Recv, src, dst, 1)
}

fn check_order(order: &[usize], channels: usize) {
    let n = order.len();
    assert!(n >= 2, "a ring needs at least 2 ranks");
    assert!(channels >= 1, "at least one channel");
    let mut seen = vec![false; n];
    for &r in order {
        assert!(r < n && !seen[r], "order must be a permutation of 0..{n}");
        seen[r] = true;
    }
}

/// Ring neighbours of each rank: (next, previous, position in the ring).
fn ring(order: &[usize]) -> Vec<(usize, usize, usize)> {
    let n = order.len();
    let mut out = vec![(0, 0, 0); n];
    for (pos, &r) in order.iter().enumerate() {
        out[r] = (order[(pos + 1) % n], order[(pos + n - 1) % n], pos);
    }
    out
}

fn program(
    name: String,
    collective: Collective,
    n: usize,
    nchunks: usize,
    inplace: bool,
    gpus: Vec<Gpu>,
) -> Program {
    Program {
        name,
        collective,
        root: 0,
        protocol: Protocol::Simple,
        ngpus: n,
        nchunksperloop: nchunks,
        inplace,
        outofplace: !inplace,
        min_bytes: 0,
        max_bytes: 0,
        gpus,
        custom: None,
        compute: None,
    }
}

fn ring_tb(next: usize, prev: usize, channel: usize, steps: Vec<Step>) -> Threadblock {
    Threadblock {
        send: Some(next),
        recv: Some(prev),
        channel,
        steps,
    }
}

/// Ring allgather: rank q's chunk c (of `channels`) travels the ring on channel c.
/// Out of place, each rank also copies its own input into its output slice.
pub fn ring_allgather(order: &[usize], channels: usize, inplace: bool) -> Program {
    check_order(order, channels);
    let n = order.len();
    let nb = ring(order);
    let gpus = (0..n)
        .map(|r| {
            let (next, prev, pos) = nb[r];
            let tbs = (0..channels)
                .map(|c| {
                    let out = |q: usize| slot(Buffer::Output, q * channels + c);
                    let mut steps = Vec::new();
                    let own = if inplace {
                        out(r)
                    } else {
                        slot(Buffer::Input, c)
                    };
                    if !inplace {
                        steps.push(Step::new(Op::Copy, own, out(r), 1));
                    }
                    steps.push(send(own, out(r)));
                    for j in 1..n {
                        let q = order[(pos + n - j) % n];
                        let sent_from = if j == 1 && !inplace {
                            slot(Buffer::Input, c)
                        } else {
                            out(q)
                        };
                        steps.push(recv(sent_from, out(q)));
                        if j < n - 1 {
                            steps.push(send(out(q), out(q)));
                        }
                    }
                    ring_tb(next, prev, c, steps)
                })
                .collect();
            Gpu {
                rank: r,
                input_chunks: if inplace { 0 } else { channels },
                output_chunks: n * channels,
                scratch_chunks: 0,
                threadblocks: tbs,
            }
        })
        .collect();
    let name = format!(
        "ring_allgather_{n}r_{channels}c{}",
        if inplace { "_ip" } else { "" }
    );
    program(name, Collective::AllGather, n, n * channels, inplace, gpus)
}

/// Steps of the reduce-scatter phase on one rank and channel: partial sums travel the ring
/// through scratch chunk `c`; returns the steps and leaves the fully reduced chunk of the
/// rank's own block in scratch chunk `c` (out of place) or in `own_slot` (in place).
fn reduce_scatter_steps(
    order: &[usize],
    r: usize,
    c: usize,
    input: impl Fn(usize) -> Slot,
    own_slot: Option<Slot>,
) -> Vec<Step> {
    let n = order.len();
    let pos = ring(order)[r].2;
    let scratch = slot(Buffer::Scratch, c);
    let owner = |j: usize| order[(pos + 2 * n - 1 - j) % n];
    let mut steps = vec![send(input(owner(0)), scratch)];
    for j in 0..n - 1 {
        let q = owner(j + 1);
        let sent_from = if j == 0 { input(q) } else { scratch };
        steps.push(recv(sent_from, scratch));
        if j < n - 2 {
            steps.push(Step::new(Op::Reduce, input(q), scratch, 1));
            steps.push(send(scratch, scratch));
        } else if let Some(own) = own_slot {
            steps.push(Step::new(Op::Reduce, scratch, own, 1));
        } else {
            steps.push(Step::new(Op::Reduce, input(q), scratch, 1));
        }
    }
    steps
}

/// Ring reduce-scatter: on channel c, the partial sum for rank q's chunk c starts at q's
/// successor and is reduced along the ring until it reaches q.
pub fn ring_reduce_scatter(order: &[usize], channels: usize, inplace: bool) -> Program {
    check_order(order, channels);
    let n = order.len();
    let nb = ring(order);
    let gpus = (0..n)
        .map(|r| {
            let (next, prev, _) = nb[r];
            let tbs = (0..channels)
                .map(|c| {
                    let input = |q: usize| slot(Buffer::Input, q * channels + c);
                    let own = inplace.then(|| slot(Buffer::Output, c));
                    let mut steps = reduce_scatter_steps(order, r, c, input, own);
                    if !inplace {
                        steps.push(Step::new(
                            Op::Copy,
                            slot(Buffer::Scratch, c),
                            slot(Buffer::Output, c),
                            1,
                        ));
                    }
                    ring_tb(next, prev, c, steps)
                })
                .collect();
            Gpu {
                rank: r,
                input_chunks: n * channels,
                output_chunks: channels,
                scratch_chunks: channels,
                threadblocks: tbs,
            }
        })
        .collect();
    let name = format!(
        "ring_reduce_scatter_{n}r_{channels}c{}",
        if inplace { "_ip" } else { "" }
    );
    program(
        name,
        Collective::ReduceScatter,
        n,
        n * channels,
        inplace,
        gpus,
    )
}

/// Ring allreduce: a ring reduce-scatter followed by a ring allgather of the reduced chunks,
/// on the same threadblock per channel. In place it addresses only the input buffer.
pub fn ring_allreduce(order: &[usize], channels: usize, inplace: bool) -> Program {
    check_order(order, channels);
    let n = order.len();
    let nb = ring(order);
    let data = if inplace {
        Buffer::Input
    } else {
        Buffer::Output
    };
    let gpus = (0..n)
        .map(|r| {
            let (next, prev, pos) = nb[r];
            let tbs = (0..channels)
                .map(|c| {
                    let input = |q: usize| slot(Buffer::Input, q * channels + c);
                    let out = |q: usize| slot(data, q * channels + c);
                    let own = inplace.then(|| input(r));
                    let mut steps = reduce_scatter_steps(order, r, c, input, own);
                    if !inplace {
                        steps.push(Step::new(Op::Copy, slot(Buffer::Scratch, c), out(r), 1));
                    }
                    steps.push(send(out(r), out(r)));
                    for j in 1..n {
                        let q = order[(pos + n - j) % n];
                        steps.push(recv(out(q), out(q)));
                        if j < n - 1 {
                            steps.push(send(out(q), out(q)));
                        }
                    }
                    ring_tb(next, prev, c, steps)
                })
                .collect();
            Gpu {
                rank: r,
                input_chunks: n * channels,
                output_chunks: if inplace { 0 } else { n * channels },
                scratch_chunks: channels,
                threadblocks: tbs,
            }
        })
        .collect();
    let name = format!(
        "ring_allreduce_{n}r_{channels}c{}",
        if inplace { "_ip" } else { "" }
    );
    program(name, Collective::AllReduce, n, n * channels, inplace, gpus)
}

/// Per-peer threadblocks on channel 0 (send and receive with one peer each) plus one local
/// threadblock: the direct pattern shared by all-to-all and allgather.
fn direct(
    n: usize,
    local: impl Fn(usize) -> Step,
    exchange: impl Fn(usize, usize) -> (Step, Step),
) -> Vec<Vec<Threadblock>> {
    (0..n)
        .map(|r| {
            let mut tbs = vec![Threadblock {
                send: None,
                recv: None,
                channel: 0,
                steps: vec![local(r)],
            }];
            for peer in (0..n).filter(|&p| p != r) {
                let (s, rc) = exchange(r, peer);
                tbs.push(Threadblock {
                    send: Some(peer),
                    recv: Some(peer),
                    channel: 0,
                    steps: vec![s, rc],
                });
            }
            tbs
        })
        .collect()
}

/// Direct all-to-all (out of place, one chunk per peer): rank r sends `i[p]` to p, which
/// stores it in `o[r]`; `i[r]` is copied locally.
pub fn direct_alltoall(n: usize) -> Program {
    assert!(n >= 2, "at least 2 ranks");
    let local = |r| Step::new(Op::Copy, slot(Buffer::Input, r), slot(Buffer::Output, r), 1);
    let tbs = direct(n, local, |r, p| {
        (
            send(slot(Buffer::Input, p), slot(Buffer::Output, r)),
            recv(slot(Buffer::Input, r), slot(Buffer::Output, p)),
        )
    });
    let gpus = tbs
        .into_iter()
        .enumerate()
        .map(|(r, t)| Gpu {
            rank: r,
            input_chunks: n,
            output_chunks: n,
            scratch_chunks: 0,
            threadblocks: t,
        })
        .collect();
    program(
        format!("direct_alltoall_{n}r"),
        Collective::AllToAll,
        n,
        n,
        false,
        gpus,
    )
}

/// Direct allgather (out of place): every rank sends its input chunk to every peer.
pub fn direct_allgather(n: usize) -> Program {
    assert!(n >= 2, "at least 2 ranks");
    let local = |r| Step::new(Op::Copy, slot(Buffer::Input, 0), slot(Buffer::Output, r), 1);
    let tbs = direct(n, local, |r, p| {
        (
            send(slot(Buffer::Input, 0), slot(Buffer::Output, r)),
            recv(slot(Buffer::Input, 0), slot(Buffer::Output, p)),
        )
    });
    let gpus = tbs
        .into_iter()
        .enumerate()
        .map(|(r, t)| Gpu {
            rank: r,
            input_chunks: 1,
            output_chunks: n,
            scratch_chunks: 0,
            threadblocks: t,
        })
        .collect();
    program(
        format!("direct_allgather_{n}r"),
        Collective::AllGather,
        n,
        n,
        false,
        gpus,
    )
}
