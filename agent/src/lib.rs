//! # apiary-agent — the on-device sidecar
//!
//! (Design notes to be completed by the agent's owner: intake → redact → outbox → push.)

pub mod tail;
