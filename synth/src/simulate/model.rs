//! The model parameters: every number that decides a simulated or predicted time besides
//! the fabric's own links, in one place ([`ModelParams`]), with defaults and a TOML reader
//! (`--model FILE`, [`ModelParams::load`]).
//!
//! Protocol latencies and NCCL's tuning figures are those of NCCL's `src/graph/tuning.cc`
//! of the 2.8/2.9 releases (`../shared/reference/nccl-tuning.md`); NVLS, which those
//! releases lack, follows NCCL 2.18 (see [`NcclTuning::nvls_hop_us`]).

use runtime::ir::{Collective, Protocol};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One value per NCCL protocol.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerProtocol<T> {
    /// Simple.
    pub simple: T,
    /// LL (8-byte lines of 4 data bytes and a 4-byte flag).
    pub ll: T,
    /// LL128 (128-byte lines of 120 data bytes).
    pub ll128: T,
}

impl<T: Copy> PerProtocol<T> {
    /// The value of `protocol`.
    pub fn get(&self, protocol: Protocol) -> T {
        match protocol {
            Protocol::Simple => self.simple,
            Protocol::LL => self.ll,
            Protocol::LL128 => self.ll128,
        }
    }
}

/// One value per kind of link a hop crosses. synth's fabrics do not mark PCIe links, so a
/// link inside a node counts as NVLink (or xGMI) and a link between nodes as network.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerLink<T> {
    /// A link inside a node.
    pub nvlink: T,
    /// A link between nodes.
    pub network: T,
}

/// NCCL's tuner (`tuning.cc`): the figures it predicts an algorithm × protocol's time with,
/// `latency + bytes / (1000 · algbw)`, to pick the one it runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NcclTuning {
    /// Base latency of the ring algorithm, µs (`baseLat[Ring]`).
    pub ring_base_us: PerProtocol<f64>,
    /// Base latency of the tree algorithm, µs (`baseLat[Tree]`).
    pub tree_base_us: PerProtocol<f64>,
    /// Per-hop latency of the ring algorithm, µs (`hwLat[NVLINK|NET][Ring]`). The simulator
    /// scales every link's alpha by this table's protocol-to-Simple ratio.
    pub ring_hop_us: PerLink<PerProtocol<f64>>,
    /// Per-hop latency of the tree algorithm, µs (`hwLat[NVLINK|NET][Tree]`).
    pub tree_hop_us: PerLink<PerProtocol<f64>>,
    /// Factor on the intra-node LL latency when there are several nodes.
    pub ll_multinode_factor: f64,
    /// Factor on the multi-node ring/Simple allreduce latency from `n/16 × 64 KiB` on
    /// (NCCL's "plateau" correction).
    pub plateau_factor: f64,
    /// Cap on LL bus bandwidth, GB/s (`llMaxBw`, Ampere, one node).
    pub ll_max_bw: f64,
    /// LL128 bus bandwidth cap per channel, GB/s, for allreduce, allgather, reduce-scatter,
    /// broadcast and reduce (`ll128MaxBwPerCh`).
    pub ll128_max_bw_per_channel: [f64; 5],
    /// Whether the tuner may pick LL128 (NCCL enables it on NVLink Volta/Ampere/Hopper).
    pub ll128_enabled: bool,
    /// Tree bus bandwidth caps, GB/s: up to two nodes, more nodes.
    pub tree_max_bw: [f64; 2],
    /// Tree correction factor per protocol by `log2(bytes / 64)` (0..22).
    pub tree_correction: PerProtocol<[f64; 22]>,
    /// NVLS (NVLink SHARP) allreduce latency, µs (NCCL 2.18 `hwLat[NVLINK][NVLS][Simple]`).
    pub nvls_hop_us: f64,
    /// Least per-GPU NVSwitch bandwidth (GB/s, one direction) of a box whose switches can
    /// reduce (NVSwitch 3, H100-class: 18 NVLink4 links, 450 GB/s). The fabric does not name
    /// its GPUs, so NVLS is offered on one node whose every rank sends through one switch
    /// constraint of at least this bandwidth.
    pub nvls_min_port_bw: f64,
}

impl Default for NcclTuning {
    fn default() -> Self {
        NcclTuning {
            ring_base_us: PerProtocol {
                ll: 3.6,
                ll128: 10.0,
                simple: 8.4,
            },
            tree_base_us: PerProtocol {
                ll: 4.4,
                ll128: 4.4,
                simple: 0.0,
            },
            ring_hop_us: PerLink {
                nvlink: PerProtocol {
                    ll: 0.47,
                    ll128: 1.9,
                    simple: 3.4,
                },
                network: PerProtocol {
                    ll: 2.7,
                    ll128: 4.0,
                    simple: 9.6,
                },
            },
            tree_hop_us: PerLink {
                nvlink: PerProtocol {
                    ll: 0.52,
                    ll128: 1.2,
                    simple: 28.0,
                },
                network: PerProtocol {
                    ll: 5.0,
                    ll128: 8.5,
                    simple: 50.0,
                },
            },
            ll_multinode_factor: 1.8,
            plateau_factor: 1.9,
            ll_max_bw: 87.7,
            ll128_max_bw_per_channel: [16.7, 18.3, 15.2, 18.8, 12.0],
            ll128_enabled: true,
            tree_max_bw: [110.0, 80.0],
            tree_correction: PerProtocol {
                ll: [
                    1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6,
                    0.7, 0.8, 0.9, 1.0, 1.0, 1.0,
                ],
                ll128: [
                    1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.8, 0.8, 0.8, 0.7,
                    0.6, 0.6, 0.6, 0.6, 0.6, 0.6,
                ],
                simple: [
                    0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5,
                    0.5, 0.6, 0.6, 0.7, 0.8, 0.9,
                ],
            },
            nvls_hop_us: 25.0,
            nvls_min_port_bw: 450.0,
        }
    }
}

impl NcclTuning {
    /// The LL128 per-channel cap for `coll` (none for collectives NCCL runs point to point).
    pub fn ll128_cap_per_channel(&self, coll: Collective) -> Option<f64> {
        let i = match coll {
            Collective::AllReduce => 0,
            Collective::AllGather => 1,
            Collective::ReduceScatter => 2,
            Collective::Broadcast => 3,
            Collective::Reduce => 4,
            _ => return None,
        };
        Some(self.ll128_max_bw_per_channel[i])
    }
}

/// Every model parameter of the simulator and of NCCL's tuner. The defaults reproduce the
/// simulator's Simple-protocol behaviour before protocols were modelled, plus NCCL's base
/// latency per protocol.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelParams {
    /// Bandwidth of local `cpy` / `re` steps, GB/s per rank (of the order of an A100's HBM:
    /// 1.5–2 TB/s raw, about half for a copy that reads and writes).
    pub local_bandwidth: f64,
    /// Messages a connection holds before a send waits (NCCL_STEPS / slice steps: 2).
    pub fifo_depth: usize,
    /// Bytes of one slice the program is replayed on, with NCCL's default buffers
    /// (msccl-ir.md §2.5): Simple 4 × 4 MiB / 8, LL 512 KiB / 8 / 2, LL128 4,915,200 / 8 ×
    /// 15 / 16.
    pub slice_bytes: PerProtocol<u64>,
    /// Payload bytes per byte on the wire (LL: 4 of 8; LL128: 120 of 128).
    pub wire_efficiency: PerProtocol<f64>,
    /// Latency of one run of a program, µs, added to every simulated time (NCCL's ring
    /// `baseLat`, the per-kernel cost of the protocol).
    pub launch_us: PerProtocol<f64>,
    /// Largest size at which the LL protocol is simulated (LL's 32 KiB slices make large
    /// simulations long, and its half-efficient wire loses there).
    pub ll_max_bytes: u64,
    /// NCCL's tuner.
    pub nccl: NcclTuning,
}

impl Default for ModelParams {
    fn default() -> Self {
        ModelParams {
            local_bandwidth: crate::simulate::DEFAULT_LOCAL_BANDWIDTH,
            fifo_depth: runtime::verify::DEFAULT_FIFO_DEPTH,
            slice_bytes: PerProtocol {
                simple: 4 * ((4u64 << 20) / 8),
                ll: ((512u64 << 10) / 8) / 2,
                ll128: 4_915_200 / 8 * 15 / 16,
            },
            wire_efficiency: PerProtocol {
                simple: 1.0,
                ll: 0.5,
                ll128: 120.0 / 128.0,
            },
            launch_us: PerProtocol {
                simple: 8.4,
                ll: 3.6,
                ll128: 10.0,
            },
            ll_max_bytes: 16 << 20,
            nccl: NcclTuning::default(),
        }
    }
}

/// Why a model file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The file could not be read.
    #[error("model file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is malformed, or names an unknown field or a value of the wrong type.
    #[error("model file {path}, line {line}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// The parser's message (names the field).
        message: String,
    },
    /// A field has a value out of its range.
    #[error("model file {path}: field {field} {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field's dotted name.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The 1-based line of a TOML error: the line of an unknown field's key (the parser's span
/// covers its whole table), else where the span starts.
fn error_line(text: &str, message: &str, span: Option<std::ops::Range<usize>>) -> usize {
    let unknown = (message.strip_prefix("unknown field `")).and_then(|rest| rest.split('`').next());
    if let Some(key) = unknown {
        let found = text.lines().position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        });
        if let Some(i) = found {
            return i + 1;
        }
    }
    span.map_or(1, |s| {
        let start = s.start.min(text.len());
        text[..start].matches('\n').count() + 1
    })
}

impl ModelParams {
    /// Reads a TOML model file: any subset of the fields, the rest defaulted.
    pub fn load(path: &Path) -> Result<ModelParams, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses the TOML `text` of the file `path` (see [`ModelParams::load`]).
    pub fn parse(text: &str, path: &Path) -> Result<ModelParams, ModelError> {
        let params: ModelParams = toml::from_str(text).map_err(|e| {
            let message = e.message().replace('\n', " ");
            let line = error_line(text, &message, e.span());
            let at = (text.lines().nth(line - 1).map(str::trim))
                .filter(|l| !l.is_empty())
                .map_or(String::new(), |l| {
                    format!(" (`{}`)", l.chars().take(60).collect::<String>())
                });
            ModelError::Parse {
                path: path.to_path_buf(),
                line,
                message: format!("{message}{at}"),
            }
        })?;
        params
            .validate()
            .map_err(|(field, reason)| ModelError::Invalid {
                path: path.to_path_buf(),
                field,
                reason,
            })?;
        Ok(params)
    }

    /// The first field out of range, with the reason.
    fn validate(&self) -> Result<(), (String, String)> {
        let positive = |field: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err((field.to_string(), format!("must be positive, got {v}")))
            }
        };
        let non_negative = |field: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err((field.to_string(), format!("must be at least 0, got {v}")))
            }
        };
        positive("local_bandwidth", self.local_bandwidth)?;
        if self.fifo_depth == 0 {
            return Err(("fifo_depth".into(), "must be at least 1".into()));
        }
        for (name, p) in [
            ("simple", Protocol::Simple),
            ("ll", Protocol::LL),
            ("ll128", Protocol::LL128),
        ] {
            if self.slice_bytes.get(p) < crate::simulate::ELEMENT_BYTES {
                return Err((
                    format!("slice_bytes.{name}"),
                    "must be at least 4 (one element)".into(),
                ));
            }
            let e = self.wire_efficiency.get(p);
            if !(e > 0.0 && e <= 1.0) {
                return Err((
                    format!("wire_efficiency.{name}"),
                    format!("must be in (0, 1], got {e}"),
                ));
            }
            non_negative(&format!("launch_us.{name}"), self.launch_us.get(p))?;
            let t = &self.nccl;
            non_negative(&format!("nccl.ring_base_us.{name}"), t.ring_base_us.get(p))?;
            non_negative(&format!("nccl.tree_base_us.{name}"), t.tree_base_us.get(p))?;
            for (kind, hop) in [
                ("nvlink", t.ring_hop_us.nvlink),
                ("network", t.ring_hop_us.network),
            ] {
                positive(&format!("nccl.ring_hop_us.{kind}.{name}"), hop.get(p))?;
            }
            for (kind, hop) in [
                ("nvlink", t.tree_hop_us.nvlink),
                ("network", t.tree_hop_us.network),
            ] {
                non_negative(&format!("nccl.tree_hop_us.{kind}.{name}"), hop.get(p))?;
            }
            for (i, &c) in t.tree_correction.get(p).iter().enumerate() {
                positive(&format!("nccl.tree_correction.{name}[{i}]"), c)?;
            }
        }
        let t = &self.nccl;
        positive("nccl.ll_multinode_factor", t.ll_multinode_factor)?;
        positive("nccl.plateau_factor", t.plateau_factor)?;
        positive("nccl.ll_max_bw", t.ll_max_bw)?;
        for (i, &c) in t.ll128_max_bw_per_channel.iter().enumerate() {
            positive(&format!("nccl.ll128_max_bw_per_channel[{i}]"), c)?;
        }
        for (i, &c) in t.tree_max_bw.iter().enumerate() {
            positive(&format!("nccl.tree_max_bw[{i}]"), c)?;
        }
        non_negative("nccl.nvls_hop_us", t.nvls_hop_us)?;
        positive("nccl.nvls_min_port_bw", t.nvls_min_port_bw)?;
        Ok(())
    }

    /// The factor on a link's alpha for a hop of `protocol` over a link of this kind
    /// (`network`: the link joins two nodes): NCCL's ring per-hop latency of the protocol
    /// over Simple's, so Simple keeps the fabric's alpha.
    pub fn alpha_factor(&self, protocol: Protocol, network: bool) -> f64 {
        let hop = if network {
            self.nccl.ring_hop_us.network
        } else {
            self.nccl.ring_hop_us.nvlink
        };
        hop.get(protocol) / hop.simple
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ModelParams, ModelError> {
        ModelParams::parse(text, Path::new("m.toml"))
    }

    #[test]
    fn a_partial_file_keeps_the_other_defaults() {
        let p =
            parse("fifo_depth = 4\n[nccl.ring_base_us]\nsimple = 1\nll = 2\nll128 = 3\n").unwrap();
        assert_eq!(p.fifo_depth, 4);
        assert_eq!(p.nccl.ring_base_us.get(Protocol::LL), 2.0);
        assert_eq!(p.slice_bytes, ModelParams::default().slice_bytes);
    }

    #[test]
    fn bad_files_name_the_file_line_and_field() {
        let e = parse("fifo_depth = 2\nfifo_dept = 3\n").unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ModelError::Parse { line: 2, .. }), "{msg}");
        assert!(msg.contains("m.toml") && msg.contains("fifo_dept"), "{msg}");
        assert!(!msg.contains('\n') && msg.len() <= 300, "{msg}");
        let e = parse("[wire_efficiency]\nsimple = 1\nll = 2\nll128 = 0.9\n").unwrap_err();
        assert!(
            matches!(&e, ModelError::Invalid { field, .. } if field == "wire_efficiency.ll"),
            "{e}"
        );
        let e = parse("local_bandwidth = \"fast\"\n").unwrap_err();
        assert!(matches!(e, ModelError::Parse { line: 1, .. }), "{e}");
        let e = ModelParams::load(Path::new("/nonexistent/m.toml")).unwrap_err();
        assert!(matches!(e, ModelError::Read { .. }), "{e}");
    }

    #[test]
    fn simple_keeps_the_links_alpha_and_ll_is_faster_per_hop() {
        let p = ModelParams::default();
        assert_eq!(p.alpha_factor(Protocol::Simple, false), 1.0);
        assert!(p.alpha_factor(Protocol::LL, false) < 0.2);
        assert!(p.alpha_factor(Protocol::LL128, true) < 1.0);
    }
}
