//! How an algorithm's steps are laid out for the runtime, beside what they send: step groups
//! (pipeline stages on channels of their own, [`groups`]) and retiming (each link's sends
//! reordered by list scheduling, [`retime`]). Both fill [`crate::algorithm::Algorithm`]'s
//! lowering hints; the lowering ([`crate::lower`]) reads them.

pub mod groups;
pub mod reference;
pub mod retime;
