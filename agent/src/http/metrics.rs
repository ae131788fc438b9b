//! `GET /metrics`: the agent's metrics in the OpenMetrics text format, encoded by `prometheus-client`.
//!
//! Every value lives elsewhere already (the outbox's persisted counters and status, the writer's
//! health, the intake's request counters), so each scrape builds a fresh [`Registry`] from one status
//! read instead of keeping a second copy of the counts up to date. Counter families are registered
//! without their `_total` suffix: the encoder adds it to the samples (`apiary_outbox_events_total{…}`), as
//! OpenMetrics names them. A labelled family with no sample yet (no event filtered so far) is left out
//! of the exposition, as `prometheus-client` does: to a scraper that is the same as a family without
//! series.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{ApiError, AppState, IntakeStats};
use crate::outbox::{HealthState, Status};

/// The content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub async fn get_metrics(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let status = state.outbox.status().await?;
    let mut registry = Registry::default();
    register_outbox(&mut registry, &status);
    register_intake(
        &mut registry,
        &state.stats,
        state.started_at.elapsed().as_secs_f64(),
    );
    gauge(
        &mut registry,
        "apiary_intake_body_bytes_in_flight",
        "Bytes of request bodies admitted and not yet answered (bounded by intake.max_bytes_in_flight)",
        state.body_budget.in_use_bytes(),
    );
    let mut out = String::with_capacity(4096);
    encode(&mut out, &registry).map_err(ApiError::Metrics)?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], out))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// An integer gauge set to `v`. (Help texts are given without their final period: the encoder adds one.)
fn gauge(registry: &mut Registry, name: &str, help: &str, v: u64) {
    let g = Gauge::<i64>::default();
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
    registry.register(name, help, g);
}

fn gauge_f64(registry: &mut Registry, name: &str, help: &str, v: f64) {
    let g = Gauge::<f64, AtomicU64>::default();
    g.set(v);
    registry.register(name, help, g);
}

/// A counter family with one sample per label.
fn counters<
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, u64)>,
) {
    let family = Family::<L, Counter>::default();
    for (label, v) in samples {
        family.get_or_create(&label).inc_by(v);
    }
    registry.register(name, help, family);
}

/// A gauge read from the status: name, help (without its final period: the encoder adds one), value.
type StatusGauge = (&'static str, &'static str, fn(&Status) -> u64);

/// The outbox's integer gauges (1/0 for the flags).
const OUTBOX_GAUGES: [StatusGauge; 13] = [
    (
        "apiary_outbox_pending_events",
        "Events committed and not yet settled",
        |s| s.stored.counters.pending,
    ),
    (
        "apiary_outbox_pending_bytes",
        "JSON bytes of the pending events",
        |s| s.stored.counters.pending_bytes,
    ),
    (
        "apiary_outbox_uploadable_events",
        "Pending events that may be uploaded",
        |s| s.stored.uploadable_events,
    ),
    (
        "apiary_outbox_held_events",
        "Pending events captured while sync was off",
        |s| s.stored.held_events,
    ),
    (
        "apiary_outbox_used_bytes",
        "Used pages times page size",
        |s| s.stored.used_bytes,
    ),
    (
        "apiary_outbox_wal_bytes",
        "Size of the write-ahead log file, on top of the used bytes",
        |s| s.stored.wal_bytes,
    ),
    ("apiary_outbox_max_bytes", "The configured cap", |s| {
        s.max_bytes
    }),
    (
        "apiary_outbox_dead_letters",
        "Rows in the dead-letter table",
        |s| s.stored.dead_letters,
    ),
    ("apiary_outbox_sessions", "Sessions in the registry", |s| {
        s.stored.sessions
    }),
    (
        "apiary_outbox_balanced",
        "1 when the outcome counters add up",
        |s| u64::from(s.stored.balanced),
    ),
    (
        "apiary_outbox_healthy",
        "1 when the last write succeeded",
        |s| u64::from(s.health.state == HealthState::Ok),
    ),
    (
        "apiary_outbox_disk_full",
        "1 while writes fail with a full disk",
        |s| u64::from(s.health.state == HealthState::DiskFull),
    ),
    ("apiary_sync_enabled", "1 when sync is enabled", |s| {
        u64::from(s.stored.sync.enabled)
    }),
];

fn register_outbox(registry: &mut Registry, s: &Status) {
    for (name, help, value) in OUTBOX_GAUGES {
        gauge(registry, name, help, value(s));
    }
    gauge_f64(
        registry,
        "apiary_outbox_oldest_pending_age_seconds",
        "Age of the oldest pending event",
        s.stored.oldest_pending_age_seconds.unwrap_or(0.0),
    );
    let c = &s.stored.counters;
    let outcomes = [
        ("received", c.received),
        ("delivered", c.delivered),
        ("duplicate", c.duplicate),
        ("rejected", c.rejected),
        ("filtered", c.filtered),
        ("evicted", c.evicted),
        ("purged", c.purged),
        ("exported", c.exported),
    ];
    counters(
        registry,
        "apiary_outbox_events",
        "Events by terminal outcome (received is the total)",
        outcomes.map(|(outcome, v)| (OutcomeLabel { outcome }, v)),
    );
    let filtered = s.stored.filtered_by_reason.iter();
    counters(
        registry,
        "apiary_outbox_filtered",
        "Filtered events by reason",
        filtered.map(|(reason, v)| {
            (
                ReasonLabel {
                    reason: reason.clone(),
                },
                *v,
            )
        }),
    );
    let refused = Counter::<u64>::default();
    refused.inc_by(c.refused);
    registry.register(
        "apiary_outbox_refused",
        "Events refused at the cap (not received)",
        refused,
    );
}

fn register_intake(registry: &mut Registry, r: &IntakeStats, uptime_seconds: f64) {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let results = [
        ("ok", load(&r.requests_ok)),
        ("partial", load(&r.requests_partial)),
        ("refused", load(&r.requests_refused)),
        ("busy", load(&r.requests_busy)),
        ("too_large", load(&r.requests_too_large)),
        ("unauthorized", load(&r.requests_unauthorized)),
        ("failed", load(&r.requests_failed)),
    ];
    counters(
        registry,
        "apiary_intake_requests",
        "POST /v1/events requests by result",
        results.map(|(result, v)| (ResultLabel { result }, v)),
    );
    gauge_f64(
        registry,
        "apiary_agent_uptime_seconds",
        "Seconds since start",
        uptime_seconds,
    );
}
