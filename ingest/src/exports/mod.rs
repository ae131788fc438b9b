//! Usage as metrics, for the tools teams already run: the Prometheus scrape of a tenant
//! (`GET /v1/metrics`, [`prometheus`]) and the OTLP push to a tenant's collector (`/v1/exports`:
//! [`store`] keeps the destinations, [`deliver`] sends, [`otlp`] encodes) both read one [`snapshot`]:
//! the same rows as `GET /v1/usage` ([`crate::query::usage`], all time, grouped by the chosen
//! dimensions) for the counters, those of `GET /v1/usage?group_by=tool` for the tool duration histogram,
//! and the counts of now behind the gauges ([`crate::query::gauges`]: sessions by status as
//! `GET /v1/sessions` derives it, devices online as `GET /v1/devices` says), and name them as [`series`]
//! says.
//!
//! Invariants:
//! - **Same numbers.** The values are the usage query's sums, nothing counted on the side: a scrape's
//!   `apiary_llm_calls_total{model="m"}` equals `/v1/usage?group_by=model` over all time, row `m`; a
//!   duplicated or late event changes both once, because both read the rollups the batch wrote.
//! - **Cumulative, once.** Every push carries the whole sums since the first event with the export's
//!   fixed start time, never a delta: a push repeated (two replicas, a retry after a lost answer) or
//!   lost changes nothing a backend computes, and a restart changes neither the values nor the start.
//! - **Counters count from the beginning.** The sums are over all time ([`crate::query::usage::all_time_from`]),
//!   so they only grow while events arrive; a re-pricing that lowers a cost is the one way a cost counter
//!   can fall, which Prometheus reads as a counter reset (see docs/exports.md).
//! - **Bounded cardinality.** The dimensions are the tenant's choice among [`LABEL_DIMS`] (never session:
//!   unbounded), and a scrape that would carry more than [`MAX_LABEL_SETS`] label sets is refused with
//!   the count named, instead of answering a series explosion (the bound holds per metric).
//! - **Gauges are of now, histograms exact.** A gauge answers every status (zeros too) of every group
//!   it has, so an emptied status reads 0 instead of its last value; the histogram's buckets are sums
//!   of the rollups' whole slots, so every bucket count is exact (see [`series::bucket_bounds_ms`]).

pub mod deliver;
pub mod otlp;
pub mod prometheus;
pub mod series;
pub mod snapshot;
pub mod store;

use crate::query::usage::Dim;

/// The dimensions a scrape may label its series with, and each label's name.
pub const LABEL_DIMS: [(Dim, &str); 5] = [
    (Dim::User, "user"),
    (Dim::Model, "model"),
    (Dim::Colony, "colony"),
    (Dim::Runtime, "runtime"),
    (Dim::Device, "device"),
];

/// The most label sets (distinct combinations of the chosen dimensions' keys) one scrape answers.
pub const MAX_LABEL_SETS: usize = 2_000;

/// The label name of a dimension a scrape may choose (None: not allowed).
pub fn label_of(d: Dim) -> Option<&'static str> {
    LABEL_DIMS.iter().find(|(x, _)| *x == d).map(|(_, l)| *l)
}
