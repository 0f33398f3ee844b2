//! The message size schedules are tuned for (the main command's headline size, 1 GB) and
//! what a piece is at that size: its bytes and the runtime slices it spans.

use crate::collective::Kind;
use crate::topology::Topology;

/// The message size (bytes) the chunk count is tuned for: the main command's headline size.
pub const REFERENCE_BYTES: u64 = 1 << 30;

/// Bytes of a piece of `kind` at `chunks` pieces per root and [`REFERENCE_BYTES`]: an
/// allgather buffer holds every root's pieces, a broadcast buffer one root's.
pub fn piece_bytes(topology: &Topology, kind: Kind, chunks: usize) -> f64 {
    let roots = if kind == Kind::Broadcast {
        1
    } else {
        topology.ranks
    };
    REFERENCE_BYTES as f64 / (roots * chunks.max(1)) as f64
}

/// Slices of the runtime (Simple protocol) per piece of `kind` at `chunks` pieces per root
/// and [`REFERENCE_BYTES`].
pub fn slices(topology: &Topology, kind: Kind, chunks: usize) -> f64 {
    let slice = crate::simulate::runtime_slice_bytes(runtime::ir::Protocol::Simple) as f64;
    piece_bytes(topology, kind, chunks) / slice
}
