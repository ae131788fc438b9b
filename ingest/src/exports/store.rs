//! The `usage_exports` rows: what an admin creates, lists and deletes (the API and the command line
//! both go through [`create`], [`list`], [`delete`]), and what the sender claims and records
//! ([`super::deliver`]).
//!
//! Headers (an API key, usually) are like a webhook's secret: accepted once, answered once at creation,
//! never listed. The URL is listed as its host and fingerprint, as alert destinations are (an OTLP
//! endpoint's query string may carry a key too).

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::header::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use super::LABEL_DIMS;
use crate::alerts::destination::{self, Kind};
use crate::error::ApiError;
use crate::query::usage::Dim;

/// Most exports a tenant keeps.
pub const MAX_PER_TENANT: i64 = 10;
/// Shortest interval between two sends of one export.
pub const MIN_INTERVAL_SECS: i32 = 5;
/// Headers the sender sets itself (or that would change the request's framing).
const RESERVED_HEADERS: [&str; 6] = [
    "content-type",
    "content-encoding",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
];

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        code: "invalid_export",
        message: message.into(),
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// An export to create.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewExport {
    /// The OTLP/HTTP metrics endpoint, e.g. `https://otlp.example.com/v1/metrics`: `https://` and public
    /// (checked again after DNS resolution at each send), as alert webhooks are.
    pub url: String,
    /// Request headers, e.g. `{"api-key": "…"}` (at most 16): kept like a secret, answered only now.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Seconds between sends (5 to 86400, default 60).
    #[serde(default)]
    pub interval_secs: Option<i32>,
    /// The attributes of every point: any of user, model, colony, runtime, device (default none). Each
    /// multiplies the points sent (see docs/exports.md).
    #[serde(default)]
    pub dimensions: Vec<String>,
}

/// An export as listed: where it sends (host and fingerprint), how often, labelled by what, and how its
/// sends went. Never its headers.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExportBody {
    pub export_id: String,
    /// The URL's host, with its port when that is not the default.
    pub host: String,
    /// The first 12 hex digits of the SHA-256 of the URL as answered at creation.
    pub url_fingerprint: String,
    pub interval_secs: i32,
    pub dimensions: Vec<String>,
    /// The start time of every cumulative point sent (RFC 3339).
    pub start_time: String,
    /// `pending` (not sent yet), `ok` (the last send succeeded) or `failing`.
    pub status: String,
    pub last_attempt_at: Option<String>,
    pub last_success_at: Option<String>,
    /// The last failed send's error (never the URL nor a header).
    pub last_error: Option<String>,
    /// Failed sends since the last success.
    pub failures: i32,
    pub created_at: String,
}

/// The answer that created an export: as listed, plus its URL and headers, shown this once.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreatedExport {
    #[serde(flatten)]
    pub export: ExportBody,
    pub url: String,
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExportList {
    pub exports: Vec<ExportBody>,
}

#[derive(Debug, sqlx::FromRow)]
struct Row {
    export_id: String,
    url: String,
    interval_secs: i32,
    dimensions: Vec<String>,
    start_at: DateTime<Utc>,
    last_attempt_at: Option<DateTime<Utc>>,
    last_success_at: Option<DateTime<Utc>>,
    last_error: Option<String>,
    failures: i32,
    created_at: DateTime<Utc>,
}

const COLUMNS: &str = "export_id, url, interval_secs, dimensions, start_at, last_attempt_at, \
    last_success_at, last_error, failures, created_at";

impl From<Row> for ExportBody {
    fn from(r: Row) -> ExportBody {
        let status = match (r.last_attempt_at, r.failures) {
            (None, _) => "pending",
            (Some(_), 0) => "ok",
            _ => "failing",
        };
        ExportBody {
            export_id: r.export_id,
            host: destination::listed_host(&r.url),
            url_fingerprint: destination::fingerprint(&r.url),
            interval_secs: r.interval_secs,
            dimensions: r.dimensions,
            start_time: rfc3339(r.start_at),
            status: status.into(),
            last_attempt_at: r.last_attempt_at.map(rfc3339),
            last_success_at: r.last_success_at.map(rfc3339),
            last_error: r.last_error,
            failures: r.failures,
            created_at: rfc3339(r.created_at),
        }
    }
}

/// The dimensions named by `words` (each once, in the order given); 400 naming one not allowed.
pub fn dimensions(words: &[String]) -> Result<Vec<Dim>, String> {
    let mut out = vec![];
    for w in words {
        let d = LABEL_DIMS
            .iter()
            .find(|(_, l)| l == w)
            .map(|(d, _)| *d)
            .ok_or_else(|| {
                format!("dimensions: {w:?} is not one of user, model, colony, runtime, device")
            })?;
        if !out.contains(&d) {
            out.push(d);
        }
    }
    Ok(out)
}

/// Checks and stores an export (the API's and the command line's one way in).
pub async fn create(
    pool: &PgPool,
    tenant_id: Uuid,
    asked: NewExport,
    allow_private: bool,
) -> Result<CreatedExport, ApiError> {
    let url =
        destination::check_url(Kind::Webhook, asked.url.trim(), allow_private).map_err(invalid)?;
    if asked.headers.len() > 16 {
        return Err(invalid("headers: at most 16"));
    }
    for (k, v) in &asked.headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| invalid(format!("headers: {k:?} is not a header name")))?;
        if RESERVED_HEADERS.contains(&name.as_str()) {
            return Err(invalid(format!("headers: {k} is set by the sender")));
        }
        if HeaderValue::from_str(v).is_err() || v.len() > 4096 {
            return Err(invalid(format!(
                "headers: the value of {k} is not a header value (visible ASCII, at most 4096)"
            )));
        }
    }
    let interval = asked.interval_secs.unwrap_or(60);
    if !(MIN_INTERVAL_SECS..=86_400).contains(&interval) {
        return Err(invalid(format!(
            "interval_secs: {MIN_INTERVAL_SECS} to 86400"
        )));
    }
    let dims = dimensions(&asked.dimensions).map_err(invalid)?;
    let words: Vec<&str> = dims.iter().filter_map(|d| super::label_of(*d)).collect();
    let id = format!("ex_{}", Uuid::new_v4().simple());
    let headers = serde_json::to_value(&asked.headers).expect("a map of strings");
    let row: Option<Row> = sqlx::query_as(&format!(
        "INSERT INTO usage_exports (tenant_id, export_id, url, headers, interval_secs, dimensions)
         SELECT $1, $2, $3, $4, $5, $6
         WHERE (SELECT count(*) FROM usage_exports WHERE tenant_id = $1) < $7
         RETURNING {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(&id)
    .bind(url.as_str())
    .bind(&headers)
    .bind(interval)
    .bind(&words)
    .bind(MAX_PER_TENANT)
    .fetch_optional(pool)
    .await?;
    let row = row.ok_or_else(|| invalid(format!("at most {MAX_PER_TENANT} exports per tenant")))?;
    Ok(CreatedExport {
        export: row.into(),
        url: url.to_string(),
        headers: asked.headers,
    })
}

/// The tenant's exports, oldest first.
pub async fn list(pool: &PgPool, tenant_id: Uuid) -> Result<ExportList, ApiError> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM usage_exports WHERE tenant_id = $1 ORDER BY created_at, export_id"
    ))
    .bind(tenant_id)
    .fetch_all(pool)
    .await?;
    Ok(ExportList {
        exports: rows.into_iter().map(ExportBody::from).collect(),
    })
}

/// Deletes an export; 404 when the tenant has none of that id.
pub async fn delete(pool: &PgPool, tenant_id: Uuid, id: &str) -> Result<(), ApiError> {
    let done = sqlx::query("DELETE FROM usage_exports WHERE tenant_id = $1 AND export_id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(pool)
        .await?;
    if done.rows_affected() == 0 {
        return Err(ApiError::NotFound("export"));
    }
    Ok(())
}
