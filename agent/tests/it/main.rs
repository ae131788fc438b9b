//! The agent's integration tests, one test binary (one link instead of one per file): each module is
//! what used to be its own `tests/*.rs` file; `support` and `tail_support` are the helpers they share.

mod support;
mod tail_support;

mod claims;
mod colony_names;
mod consent_export;
mod crash;
mod dedup;
mod durations;
mod full_disk;
mod http_api;
mod intake_parser;
mod metrics;
mod outbox_model;
mod quota;
mod settings_page;
mod settings_views;
mod status_model;
mod tail_bad_input;
mod tail_fixture;
mod tail_follow;
mod tail_restart;
mod usage;
mod wal;
mod work_model;
