//! `GET /metrics`: Prometheus text exposition, written by hand.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::{ApiError, AppState};

pub async fn get_metrics(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let s = state.outbox.status().await?;
    let mut out = String::with_capacity(4096);
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "{name}{labels} {v}");
        }
    };
    let st = &s.stored;
    let c = &st.counters;
    metric(
        "apiary_outbox_pending_events",
        "gauge",
        "Events committed and not yet settled.",
        &[("", c.pending as f64)],
    );
    metric(
        "apiary_outbox_pending_bytes",
        "gauge",
        "JSON bytes of the pending events.",
        &[("", c.pending_bytes as f64)],
    );
    metric(
        "apiary_outbox_uploadable_events",
        "gauge",
        "Pending events that may be uploaded.",
        &[("", st.uploadable_events as f64)],
    );
    metric(
        "apiary_outbox_held_events",
        "gauge",
        "Pending events captured while sync was off.",
        &[("", st.held_events as f64)],
    );
    metric(
        "apiary_outbox_oldest_pending_age_seconds",
        "gauge",
        "Age of the oldest pending event.",
        &[("", st.oldest_pending_age_seconds.unwrap_or(0.0))],
    );
    metric(
        "apiary_outbox_used_bytes",
        "gauge",
        "Used pages times page size.",
        &[("", st.used_bytes as f64)],
    );
    metric(
        "apiary_outbox_wal_bytes",
        "gauge",
        "Size of the write-ahead log file, on top of the used bytes.",
        &[("", st.wal_bytes as f64)],
    );
    metric(
        "apiary_outbox_max_bytes",
        "gauge",
        "The configured cap.",
        &[("", s.max_bytes as f64)],
    );
    metric(
        "apiary_outbox_dead_letters",
        "gauge",
        "Rows in the dead-letter table.",
        &[("", st.dead_letters as f64)],
    );
    metric(
        "apiary_outbox_sessions",
        "gauge",
        "Sessions in the registry.",
        &[("", st.sessions as f64)],
    );
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
    let labels: Vec<(String, f64)> = outcomes
        .iter()
        .map(|(o, v)| (format!("{{outcome=\"{o}\"}}"), *v as f64))
        .collect();
    let refs: Vec<(&str, f64)> = labels.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    metric(
        "apiary_outbox_events_total",
        "counter",
        "Events by terminal outcome (received is the total).",
        &refs,
    );
    let labels: Vec<(String, f64)> = st
        .filtered_by_reason
        .iter()
        .map(|(r, v)| (format!("{{reason=\"{r}\"}}"), *v as f64))
        .collect();
    let refs: Vec<(&str, f64)> = labels.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    metric(
        "apiary_outbox_filtered_total",
        "counter",
        "Filtered events by reason.",
        &refs,
    );
    metric(
        "apiary_outbox_refused_total",
        "counter",
        "Events refused at the cap (not received).",
        &[("", c.refused as f64)],
    );
    metric(
        "apiary_outbox_balanced",
        "gauge",
        "1 when the outcome counters add up.",
        &[("", f64::from(u8::from(st.balanced)))],
    );
    let h = &s.health;
    metric(
        "apiary_outbox_healthy",
        "gauge",
        "1 when the last write succeeded.",
        &[("", f64::from(u8::from(h.state == "ok")))],
    );
    metric(
        "apiary_outbox_disk_full",
        "gauge",
        "1 while writes fail with a full disk.",
        &[("", f64::from(u8::from(h.state == "disk_full")))],
    );
    metric(
        "apiary_sync_enabled",
        "gauge",
        "1 when sync is enabled.",
        &[("", f64::from(u8::from(st.sync.enabled)))],
    );
    let r = &state.stats;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
    metric(
        "apiary_intake_requests_total",
        "counter",
        "POST /v1/events requests by result.",
        &[
            ("{result=\"ok\"}", load(&r.requests_ok)),
            ("{result=\"partial\"}", load(&r.requests_partial)),
            ("{result=\"refused\"}", load(&r.requests_refused)),
            ("{result=\"too_large\"}", load(&r.requests_too_large)),
            ("{result=\"unauthorized\"}", load(&r.requests_unauthorized)),
            ("{result=\"failed\"}", load(&r.requests_failed)),
        ],
    );
    metric(
        "apiary_agent_uptime_seconds",
        "gauge",
        "Seconds since start.",
        &[("", state.started_at.elapsed().as_secs_f64())],
    );
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out))
}
