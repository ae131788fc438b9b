//! Tailing Hive's own JSONL logs (to be written). See `sink.rs` for the interface to the outbox.

pub mod sink;
