//! The export sender: claims due exports (`FOR UPDATE SKIP LOCKED`, with a lease, one tenant per
//! statement as Citus asks), reads the tenant's usage over all time grouped by the export's dimensions
//! (the `/v1/usage` query), encodes it ([`super::otlp`]), gzips it and POSTs it the way alert webhooks
//! are sent ([`crate::alerts::deliver::post_checked`]: the URL checked again, the host resolved and
//! checked now and the request pinned to those addresses, no redirect, no proxy of the environment),
//! then records the outcome while it still holds the claim (the claim number fences a replica whose
//! lease lapsed). A snapshot past the label-set bound (see [`super::MAX_LABEL_SETS`]) is a failed send
//! whose error names the count.
//!
//! Next send: a success or a refusal (4xx) after the interval; a retryable failure (timeout, 408, 429,
//! 5xx) after the alerts' backoff (`Retry-After` as a floor), never later than the interval. Every send
//! carries the whole cumulative sums, so a send repeated by a second replica, or lost, changes nothing
//! a backend computes.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use apiary_plumbing::backoff::BackoffPolicy;
use chrono::{DateTime, Utc};
use flate2::write::GzEncoder;
use prost::Message;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use sqlx::PgPool;
use uuid::Uuid;

use super::snapshot::Snapshot;
use super::{otlp, store};
use crate::access::TenantRead;
use crate::alerts::deliver::{post_checked, Outcome};
use crate::alerts::destination::{self, Kind};
use crate::config::AlertSettings;
use crate::query::ReadDb;

/// Exports claimed per round.
const CLAIM: i64 = 16;
/// How often due exports are looked for.
const POLL: Duration = Duration::from_millis(500);

/// A claimed export.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    pub tenant_id: Uuid,
    pub export_id: String,
    pub url: String,
    pub headers: sqlx::types::Json<BTreeMap<String, String>>,
    pub interval_secs: i32,
    pub dimensions: Vec<String>,
    pub start_at: DateTime<Utc>,
    /// This claim's number (the fence).
    pub claims: i64,
    pub failures: i32,
}

/// Claims up to [`CLAIM`] due exports for `lease`.
pub async fn claim(pool: &PgPool, lease: Duration) -> Result<Vec<Claimed>, sqlx::Error> {
    let tenants: Vec<Uuid> = sqlx::query_scalar(
        "SELECT tenant_id FROM usage_exports
         WHERE next_at <= now() AND (lease_until IS NULL OR lease_until < now())
         GROUP BY tenant_id ORDER BY min(next_at), tenant_id LIMIT $1",
    )
    .bind(CLAIM)
    .fetch_all(pool)
    .await?;
    let mut out = Vec::new();
    for tenant in tenants {
        let room = CLAIM - out.len() as i64;
        if room <= 0 {
            break;
        }
        let rows: Vec<Claimed> = sqlx::query_as(
            "WITH due AS (
                 SELECT tenant_id, export_id FROM usage_exports
                 WHERE tenant_id = $3 AND next_at <= now()
                   AND (lease_until IS NULL OR lease_until < now())
                 ORDER BY next_at LIMIT $1
                 FOR UPDATE SKIP LOCKED)
             UPDATE usage_exports e
                SET lease_until = now() + make_interval(secs => $2), claims = e.claims + 1
               FROM due
              WHERE e.tenant_id = $3 AND e.export_id = due.export_id
             RETURNING e.tenant_id, e.export_id, e.url, e.headers, e.interval_secs, e.dimensions,
                       e.start_at, e.claims, e.failures",
        )
        .bind(room)
        .bind(lease.as_secs_f64())
        .bind(tenant)
        .fetch_all(pool)
        .await?;
        out.extend(rows);
    }
    Ok(out)
}

/// The request body of one send: the tenant's usage, tool durations, sessions and devices now ([`Snapshot`]),
/// encoded and gzipped.
pub async fn body(db: &ReadDb, c: &Claimed, now: DateTime<Utc>) -> Result<Vec<u8>, String> {
    let dims = store::dimensions(&c.dimensions)?;
    let reader = TenantRead::tenant_wide(c.tenant_id);
    let snapshot = Snapshot::read(db, &reader, &dims, now)
        .await
        .map_err(|e| format!("reading usage: {e}"))?;
    let request = otlp::request(c.tenant_id, c.start_at, now, &snapshot);
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&request.encode_to_vec())
        .and_then(|_| gz.finish())
        .map_err(|e| format!("compressing: {e}"))
}

/// Sends one export now.
pub async fn send(db: &ReadDb, c: &Claimed, settings: &AlertSettings) -> Outcome {
    let url =
        match destination::check_url(Kind::Webhook, &c.url, settings.allow_private_destinations) {
            Ok(u) => u,
            Err(e) => return Outcome::Permanent(e),
        };
    let body = match body(db, c, Utc::now()).await {
        Ok(b) => b,
        Err(e) => return Outcome::Retry(None, e),
    };
    let mut headers = HeaderMap::new();
    for (k, v) in c.headers.iter() {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            headers.insert(k, v);
        }
    }
    headers.insert(
        reqwest::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-protobuf"),
    );
    headers.insert(
        reqwest::header::CONTENT_ENCODING,
        HeaderValue::from_static("gzip"),
    );
    post_checked(&url, settings, headers, body).await
}

/// When to send next after `outcome`, and the failures count then.
pub fn next(c: &Claimed, outcome: &Outcome, settings: &AlertSettings) -> (Duration, i32) {
    let interval = Duration::from_secs(c.interval_secs.max(1) as u64);
    match outcome {
        Outcome::Delivered => (interval, 0),
        Outcome::Permanent(_) => (interval, c.failures + 1),
        Outcome::Retry(after, _) => {
            let policy = BackoffPolicy {
                base: Duration::from_millis(settings.retry_base_ms),
                cap: Duration::from_secs(settings.retry_cap_secs),
            };
            let failures = c.failures + 1;
            let delay = policy.delay(failures as u32, *after).min(interval);
            (after.map_or(delay, |a| delay.max(a)), failures)
        }
    }
}

/// Records a send's outcome, if the claim is still ours.
pub async fn record(
    pool: &PgPool,
    c: &Claimed,
    outcome: &Outcome,
    settings: &AlertSettings,
) -> Result<(), sqlx::Error> {
    let (delay, failures) = next(c, outcome, settings);
    let error = match outcome {
        Outcome::Delivered => None,
        Outcome::Permanent(e) | Outcome::Retry(_, e) => Some(e.as_str()),
    };
    // The success time as a choice of SQL, not a CASE around now() (Citus refuses that on a
    // distributed table).
    let success = if error.is_none() {
        "now()"
    } else {
        "last_success_at"
    };
    sqlx::query(&format!(
        "UPDATE usage_exports
            SET lease_until = NULL, failures = $4, last_error = $5, last_attempt_at = now(),
                last_success_at = {success}, next_at = now() + make_interval(secs => $6)
          WHERE tenant_id = $1 AND export_id = $2 AND claims = $3"
    ))
    .bind(c.tenant_id)
    .bind(&c.export_id)
    .bind(c.claims)
    .bind(failures)
    .bind(error)
    .bind(delay.as_secs_f64())
    .execute(pool)
    .await?;
    match error {
        None => {
            tracing::debug!(tenant_id = %c.tenant_id, export_id = %c.export_id, "usage exported")
        }
        Some(e) => {
            tracing::info!(tenant_id = %c.tenant_id, export_id = %c.export_id, failures, error = e, retry_in_ms = delay.as_millis() as u64, "usage export failed; will retry")
        }
    }
    Ok(())
}

/// Claims, sends and records until the process stops; the sends of one round run concurrently.
pub async fn run(pool: PgPool, db: ReadDb, settings: Arc<AlertSettings>) {
    // Long enough for the usage query, the slowest send and the write after it.
    let lease = Duration::from_secs(settings.delivery_timeout_secs * 2 + 30);
    loop {
        let claimed = match claim(&pool, lease).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "could not claim usage exports");
                tokio::time::sleep(POLL * 4).await;
                continue;
            }
        };
        if claimed.is_empty() {
            tokio::time::sleep(POLL).await;
            continue;
        }
        let sends = claimed.iter().map(|c| {
            let (pool, db, settings) = (&pool, &db, &settings);
            async move {
                let outcome = send(db, c, settings).await;
                if let Err(e) = record(pool, c, &outcome, settings).await {
                    tracing::warn!(error = %e, export_id = %c.export_id, "could not record a usage export; it is sent again after its lease");
                }
            }
        });
        futures::future::join_all(sends).await;
    }
}
