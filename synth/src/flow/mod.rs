//! Flow-based bandwidth analysis: a fabric as an exact integer flow network, maximum flow,
//! and the exact bandwidth optimum of collectives (ForestColl-style cut conditions).

pub mod maxflow;
pub mod network;
pub mod optimum;

pub use maxflow::MaxFlow;
pub use network::FlowNetwork;
pub use optimum::{allgather_rate, broadcast_rate, min_rank_cut, Rate};
