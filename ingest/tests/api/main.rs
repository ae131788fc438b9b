//! API tests: the real server on port 0, a fresh database per test (`#[sqlx::test]` reads DATABASE_URL;
//! `scripts/test.sh` provides one).

mod helpers;

mod alert_destinations;
mod alerts;
mod bad_input;
mod batch_writer;
mod batches;
mod budgets;
mod cadence;
mod citus;
mod colony_names;
mod colony_usage;
mod cross_tenant;
mod dashboard;
mod dashboard_tree;
mod device_keys;
mod durations;
mod exactness;
mod import;
mod openapi;
mod ops;
mod ownership;
mod prices;
mod sessions;
mod status_agreement;
mod status_history;
mod stream;
mod usage;
mod usage_pages;
mod visibility;
mod work;
