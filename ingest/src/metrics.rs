//! Prometheus metrics, hand-rolled (a few atomics; no registry crate needed) and rendered in the text
//! exposition format by `GET /metrics`. Names follow `apiary_ingest_<thing>_<unit>`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Upper bounds (seconds) of the latency histogram buckets.
const BOUNDS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 5.0];

/// A latency histogram with fixed buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; 10],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, b) in BOUNDS.iter().enumerate() {
            if secs <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

/// Every metric of the process.
#[derive(Debug, Default)]
pub struct Metrics {
    pub batches: Counter,
    pub events_accepted: Counter,
    pub events_duplicate: Counter,
    pub events_rejected: Counter,
    pub batches_refused: Counter,
    pub rate_limited: Counter,
    pub batch_seconds: Histogram,
}

impl Metrics {
    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counters: [(&str, &str, &Counter); 6] = [
            (
                "apiary_ingest_batches_total",
                "Batches stored.",
                &self.batches,
            ),
            (
                "apiary_ingest_events_accepted_total",
                "Events stored for the first time.",
                &self.events_accepted,
            ),
            (
                "apiary_ingest_events_duplicate_total",
                "Events already stored.",
                &self.events_duplicate,
            ),
            (
                "apiary_ingest_events_rejected_total",
                "Events refused with a reason.",
                &self.events_rejected,
            ),
            (
                "apiary_ingest_batches_refused_total",
                "Whole batches refused (4xx).",
                &self.batches_refused,
            ),
            (
                "apiary_ingest_rate_limited_total",
                "Requests answered 429.",
                &self.rate_limited,
            ),
        ];
        for (name, help, c) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                c.get()
            );
        }
        let h = &self.batch_seconds;
        let name = "apiary_ingest_batch_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time to store a batch.\n# TYPE {name} histogram"
        );
        for (i, b) in BOUNDS.iter().enumerate() {
            let n = h.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {n}");
        }
        let count = h.count.load(Ordering::Relaxed);
        let sum = h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {count}\n{name}_sum {sum}\n{name}_count {count}"
        );
        out
    }
}
