//! The limits of the MSCCL runtimes (msccl-ir.md §1.1, §1.5, §1.6, §1.11), in one place:
//! per flavour where they differ ([`Limits`]: threadblocks, steps, fused instructions) and as
//! constants where every flavour shares them (`cnt`, offsets, `depid`, name length). The XML
//! writer and reader check against them, and synth's lowering and engines size programs by
//! them.

use crate::ir::Flavor;

/// Most chunks one step moves (`cnt` must stay below 72), in every flavour.
pub const MAX_COUNT: usize = 71;
/// Largest buffer offset (offsets are stored as int16).
pub const MAX_OFFSET: usize = 32767;
/// Largest threadblock id a dependency may name (`depid` is stored as int8).
pub const MAX_DEPID: usize = 127;
/// Most characters of a program name (legacy copies at most 63 characters of `name`).
pub const MAX_NAME: usize = 63;
/// Most threadblocks of one rank with a send peer, and most with a receive peer, on one
/// channel (`MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL`: "too many sends/recvs per channel"), in
/// every flavour.
pub const MAX_PEER_TBS_PER_CHANNEL: usize = 32;
/// Most XML elements the runtimes' parser holds for one rank: the `algo`, every `gpu`, and
/// that rank's `tb` and `step` elements (`MAX_NODES` = 4096; it refuses to read on once 4096
/// are held, so at most 4095 fit), in every flavour.
pub const MAX_RANK_ELEMENTS: usize = 4095;

/// Whether a program name may hold `c`: the XML `name` attribute carries no quotes, `<`,
/// `>`, `&` or control characters.
pub fn name_char(c: char) -> bool {
    !(c == '"' || c == '<' || c == '>' || c == '&' || c.is_control())
}

/// The limits of one runtime flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Threadblocks per rank.
    pub max_tbs: usize,
    /// Steps per threadblock, nops included.
    pub max_steps: usize,
    /// Channels (exclusive bound on `chan`) in the conservative contract.
    pub max_channels: usize,
    /// Whether `rcs`, `rrs`, `rrc`, `rrcs` run.
    pub fused_ops: bool,
}

/// The NCCL-based executor's limits.
const NCCL: Limits = Limits {
    max_tbs: 1024,
    max_steps: 64,
    max_channels: 32,
    fused_ops: true,
};

/// RCCL's limits: 64 threadblocks, no fused instructions.
const RCCL: Limits = Limits {
    max_tbs: 64,
    max_steps: 64,
    max_channels: 32,
    fused_ops: false,
};

/// The legacy runtime's limits: 216 threadblocks of up to 256 steps.
const LEGACY: Limits = Limits {
    max_tbs: 216,
    max_steps: 256,
    max_channels: 32,
    fused_ops: true,
};

impl Limits {
    /// What every flavour accepts: a program within these loads on each runtime (synth sizes
    /// its programs by them, whatever flavour they are written in).
    pub const PORTABLE: Limits = NCCL.narrowed(RCCL).narrowed(LEGACY);

    /// The most any flavour accepts: a program past these loads on no runtime.
    pub const LARGEST: Limits = NCCL.widened(RCCL).widened(LEGACY);

    /// The limits of a flavour (msccl-ir.md §1.11).
    pub const fn of(flavor: Flavor) -> Limits {
        match flavor {
            Flavor::Nccl => NCCL,
            Flavor::Rccl => RCCL,
            Flavor::Legacy => LEGACY,
        }
    }

    /// Transfers one link can carry in a program: a threadblock per channel on its
    /// connection, each of at most [`Limits::max_steps`] steps.
    pub const fn link_transfers(&self) -> usize {
        self.max_channels * self.max_steps
    }

    /// The limits both `self` and `other` accept.
    const fn narrowed(self, other: Limits) -> Limits {
        Limits {
            max_tbs: min(self.max_tbs, other.max_tbs),
            max_steps: min(self.max_steps, other.max_steps),
            max_channels: min(self.max_channels, other.max_channels),
            fused_ops: self.fused_ops && other.fused_ops,
        }
    }

    /// The limits either `self` or `other` accepts.
    const fn widened(self, other: Limits) -> Limits {
        Limits {
            max_tbs: max(self.max_tbs, other.max_tbs),
            max_steps: max(self.max_steps, other.max_steps),
            max_channels: max(self.max_channels, other.max_channels),
            fused_ops: self.fused_ops || other.fused_ops,
        }
    }
}

/// The smaller of two counts, in a `const` context.
const fn min(a: usize, b: usize) -> usize {
    if a < b {
        a
    } else {
        b
    }
}

/// The larger of two counts, in a `const` context.
const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_and_largest_bound_every_flavour() {
        assert_eq!(
            Limits::PORTABLE,
            Limits {
                max_tbs: 64,
                max_steps: 64,
                max_channels: 32,
                fused_ops: false
            }
        );
        assert_eq!(
            (Limits::LARGEST.max_tbs, Limits::LARGEST.max_steps),
            (1024, 256)
        );
        assert_eq!(Limits::PORTABLE.link_transfers(), 32 * 64);
    }
}
