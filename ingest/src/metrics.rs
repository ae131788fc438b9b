//! Prometheus metrics of the ingest, kept and exposed by `prometheus-client` (the Prometheus project's
//! Rust client) and served by `GET /metrics` in the OpenMetrics text format, which Prometheus scrapes
//! natively.
//!
//! Names follow `apiary_ingest_<thing>_<unit>`; a counter is registered without its `_total`, which the
//! encoder appends, so the series are the ones dashboards already use (`apiary_ingest_batches_total`,
//! `apiary_ingest_batch_duration_seconds_bucket{le="0.05"}`, ...). Values are atomics: recording never
//! takes a lock.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::cadence::Cadence;

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the batch latency histogram's buckets.
const BOUNDS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 5.0];

/// Every metric of the process. Handles are cheap clones of shared atomics.
#[derive(Debug)]
pub struct Metrics {
    /// Batches stored.
    pub batches: Counter,
    /// Events stored for the first time.
    pub events_accepted: Counter,
    /// Events already stored (replays, retries).
    pub events_duplicate: Counter,
    /// Events refused with a reason.
    pub events_rejected: Counter,
    /// Whole batches refused (4xx).
    pub batches_refused: Counter,
    /// Of those, batches answered 429 `overloaded` beyond the node's bound on batches in flight.
    pub batches_overloaded: Counter,
    /// Of the refused too (apart from `batches_overloaded`), batches answered 429 `overloaded` because
    /// their token had its share of the bound in flight (`max_batches_in_flight_per_token`).
    pub batches_over_token_share: Counter,
    /// Requests answered 429 by the per-token rate limit.
    pub rate_limited: Counter,
    /// Time to check and store a batch.
    pub batch_seconds: Histogram,
    /// The bound on batches in flight in force (`crate::cadence`: between `min_batches_in_flight` and
    /// `max_batches_in_flight`, lower while batches are slow).
    in_flight_bound: Gauge,
    /// The push interval the ingest asks for at the load's level (each device gets 75–125% of it).
    push_interval_seconds: Gauge<f64, AtomicU64>,
    /// Where the two gauges above are read from at each scrape (none in unit tests).
    cadence: Option<Arc<Cadence>>,
    /// Where the metrics above are registered, for [`Metrics::render`].
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let metrics = Metrics {
            batches: Counter::default(),
            events_accepted: Counter::default(),
            events_duplicate: Counter::default(),
            events_rejected: Counter::default(),
            batches_refused: Counter::default(),
            batches_overloaded: Counter::default(),
            batches_over_token_share: Counter::default(),
            rate_limited: Counter::default(),
            batch_seconds: Histogram::new(BOUNDS),
            in_flight_bound: Gauge::default(),
            push_interval_seconds: Gauge::default(),
            cadence: None,
            registry: Registry::default(),
        };
        metrics.registered()
    }
}

impl Metrics {
    fn registered(mut self) -> Metrics {
        let counters = [
            ("apiary_ingest_batches", "Batches stored.", &self.batches),
            (
                "apiary_ingest_events_accepted",
                "Events stored for the first time.",
                &self.events_accepted,
            ),
            (
                "apiary_ingest_events_duplicate",
                "Events already stored.",
                &self.events_duplicate,
            ),
            (
                "apiary_ingest_events_rejected",
                "Events refused with a reason.",
                &self.events_rejected,
            ),
            (
                "apiary_ingest_batches_refused",
                "Whole batches refused (4xx).",
                &self.batches_refused,
            ),
            (
                "apiary_ingest_batches_overloaded",
                "Batches answered 429 overloaded (beyond the node's bound in flight, not a token's share; also in batches_refused).",
                &self.batches_overloaded,
            ),
            (
                "apiary_ingest_batches_over_token_share",
                "Batches answered 429 overloaded because their token had its share of the bound in flight (also in batches_refused).",
                &self.batches_over_token_share,
            ),
            (
                "apiary_ingest_rate_limited",
                "Requests answered 429.",
                &self.rate_limited,
            ),
        ];
        for (name, help, counter) in counters {
            self.registry.register(name, help, counter.clone());
        }
        self.registry.register(
            "apiary_ingest_batch_duration_seconds",
            "Time to store a batch.",
            self.batch_seconds.clone(),
        );
        self.registry.register(
            "apiary_ingest_batches_in_flight_bound",
            "Batches taken at once before 429 (lower while batches are slow).",
            self.in_flight_bound.clone(),
        );
        self.registry.register(
            "apiary_ingest_push_interval_seconds",
            "The push interval asked of agents at the current load (each device 75-125% of it).",
            self.push_interval_seconds.clone(),
        );
        self
    }

    /// Metrics whose cadence gauges are read from `cadence` at each scrape (a replica that stopped
    /// getting batches shows its level coming down, not the last one a batch saw).
    pub fn with_cadence(cadence: Arc<Cadence>) -> Metrics {
        Metrics {
            cadence: Some(cadence),
            ..Metrics::default()
        }
    }

    /// Records the cadence in force: the bound on batches in flight and the interval asked.
    fn observe_cadence(&self, bound: usize, interval: Duration) {
        self.in_flight_bound
            .set(i64::try_from(bound).unwrap_or(i64::MAX));
        self.push_interval_seconds.set(interval.as_secs_f64());
    }

    /// Records one stored batch's time.
    pub fn observe_batch(&self, took: Duration) {
        self.batch_seconds.observe(took.as_secs_f64());
    }

    /// The OpenMetrics text exposition ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        if let Some(c) = &self.cadence {
            // The interval first: reading it closes the windows that ended, which moves the bound.
            let interval = c.level_interval();
            self.observe_cadence(c.bound(), interval);
        }
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_keeps_the_series_names_and_counts() {
        let m = Metrics::default();
        m.batches.inc();
        m.events_accepted.inc_by(5);
        m.observe_batch(Duration::from_millis(30));
        m.observe_cadence(48, Duration::from_millis(4_000));
        let text = m.render();
        assert!(
            text.contains("\napiary_ingest_batches_in_flight_bound 48\n"),
            "{text}"
        );
        assert!(
            text.contains("\napiary_ingest_push_interval_seconds 4.0\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE apiary_ingest_batches counter\n"),
            "{text}"
        );
        assert!(text.contains("\napiary_ingest_batches_total 1\n"), "{text}");
        assert!(
            text.contains("\napiary_ingest_events_accepted_total 5\n"),
            "{text}"
        );
        assert!(
            text.contains("\napiary_ingest_rate_limited_total 0\n"),
            "{text}"
        );
        assert!(
            text.contains("\napiary_ingest_batches_overloaded_total 0\n"),
            "{text}"
        );
        assert!(
            text.contains("\napiary_ingest_batches_over_token_share_total 0\n"),
            "{text}"
        );
        assert!(
            text.contains("apiary_ingest_batch_duration_seconds_bucket{le=\"0.025\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("apiary_ingest_batch_duration_seconds_bucket{le=\"0.05\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("apiary_ingest_batch_duration_seconds_count 1\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
