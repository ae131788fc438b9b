//! `GET /v1/colonies`: the tenant's colonies by key — their runs across sessions and days, worker counts,
//! cost per day and the admins' labels.
//!
//! - Runs come from `colony_runs` (see `crate::store::colonies`); a run's workers are the sessions whose
//!   `colony_id` or parent is the run's session; its last activity is the latest event of the run or its
//!   workers.
//! - Cost per day is the usage query of `/v1/usage?group_by=colony&granularity=day` (same rollups, same
//!   exact integer sums, same buckets in `tz`), keeping the rows whose colony is a key.
//! - A colony's `name` is there only when a run's `colony.created` carried it (the tenant chose
//!   `names` and the device's user consented, see `apiary_schema::colony`); the `label` is an admin's.
//! - A `read` token bound to a user sees only the runs that user's events named, and only that user's
//!   usage in the sums (the usage query applies the same scope).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::usage::body::UsageSums;
use super::usage::{self, Dim, Granularity, GroupBy, Part, UsageParams, UsageQuery, Within};
use super::ReadDb;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::rollups::Usage;

/// One run of a colony: the session the colony ran under and what ran in it.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
pub struct ColonyRun {
    /// The colony's session of this run (Hive's fork of the queen session, or the queen session itself).
    pub session_id: String,
    /// The session that created or loaded the colony, when it is not the run's own.
    pub parent_session_id: Option<String>,
    /// The user whose session named the run.
    pub user_id: String,
    /// When the colony.created event of this run happened (effective time).
    pub created_at: DateTime<Utc>,
    /// The latest event of the run's session or its workers.
    pub last_event_at: Option<DateTime<Utc>>,
    /// Sessions whose colony or parent is this run's session.
    pub workers: i64,
    /// The colony's name as this run's event carried it: only for a tenant whose `colony_names` is
    /// `names`, from a device whose user consented; null otherwise.
    pub colony_name: Option<String>,
}

/// One day of a colony's usage (a bucket of `granularity=day` in `tz`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ColonyDay {
    /// The day's start in `tz` (RFC 3339).
    pub bucket: String,
    #[serde(flatten)]
    pub sums: UsageSums,
}

/// A colony, by key.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ColonyBody {
    /// `ck_` + 32 hex digits (the tenant's key of the colony's name), or `dk_` + 32 (a device's own key,
    /// from before the device knew the tenant's secret).
    pub colony_key: String,
    /// The display label an admin set (`PUT /v1/colonies/{key}/label`), if any.
    pub label: Option<String>,
    /// The colony's name, when a run carried it (the latest such run's; see `runs[].colony_name`).
    pub name: Option<String>,
    /// The earliest run's creation.
    pub first_seen_at: DateTime<Utc>,
    /// The latest activity of any run (else the latest creation).
    pub last_seen_at: DateTime<Utc>,
    /// Distinct sessions: the runs' own plus their workers.
    pub sessions: i64,
    /// Workers over all runs.
    pub workers: i64,
    /// Oldest first.
    pub runs: Vec<ColonyRun>,
    /// Usage per day over `[from, to)`, days without usage left out.
    pub days: Vec<ColonyDay>,
    /// The sum of `days`.
    pub totals: UsageSums,
}

/// The answer of `GET /v1/colonies`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ColonyList {
    /// The usage range (RFC 3339 in `tz`).
    pub from: String,
    pub to: String,
    pub tz: String,
    /// Most recently seen first.
    pub colonies: Vec<ColonyBody>,
}

#[derive(sqlx::FromRow)]
struct RunRow {
    colony_key: String,
    #[sqlx(flatten)]
    run: ColonyRun,
}

/// The colonies `reader` may see, with usage per day over the range `params` give (`from`, `to`, `tz`;
/// the defaults of `/v1/usage`).
pub async fn list(
    db: &ReadDb,
    reader: &TenantRead,
    params: UsageParams,
) -> Result<ColonyList, ApiError> {
    let params = UsageParams {
        group_by: Some(GroupBy(vec![Dim::Colony])),
        granularity: Some(Granularity::Day),
        ..params
    };
    let q = UsageQuery::from_params(params, Utc::now())?;
    // The runs, the labels and the usage are independent reads: run side by side, on three of the
    // pool's connections (a year's colonies took the sum of the three, about half of it the runs).
    let runs = sqlx::query_as::<_, RunRow>(
        "SELECT r.colony_key, r.session_id, r.parent_session_id, r.user_id, r.created_at, r.colony_name,
            m.last_event_at, m.workers
         FROM colony_runs r CROSS JOIN LATERAL (
            SELECT max(s.last_event_at) AS last_event_at,
                count(*) FILTER (WHERE s.session_id <> r.session_id) AS workers
            FROM sessions s WHERE s.tenant_id = $1
                AND (s.session_id = r.session_id OR s.colony_id = r.session_id
                     OR s.parent_session_id = r.session_id)) m
         WHERE r.tenant_id = $1 AND ($2::text IS NULL OR r.user_id = $2)
         ORDER BY r.colony_key, r.created_at, r.session_id",
    )
    .bind(reader.tenant_id())
    .bind(reader.user());
    // Its lateral per run is estimated past `jit_above_cost`.
    let runs = db.fetch_all_without_jit(runs);
    let labels = sqlx::query_as::<_, (String, String)>(
        "SELECT colony_key, label FROM colony_labels WHERE tenant_id = $1",
    )
    .bind(reader.tenant_id())
    .fetch_all(&db.pool);
    // Bounded like a usage answer: a row per colony and day.
    let usage = usage::fetch::run_at_most(
        db,
        Within::Tenant(reader, &Part::Whole),
        &q,
        Some(usage::page::MAX_ROWS),
    );
    let (runs, labels, rows) = tokio::try_join!(
        async { runs.await.map_err(ApiError::from) },
        async { labels.await.map_err(ApiError::from) },
        usage,
    )?;
    let rows = rows.ok_or_else(|| ApiError::Unprocessable {
        code: "too_many_rows",
        message: format!(
            "the colonies' usage has more than {} rows (a row per colony and day): ask for a shorter \
             range",
            usage::page::MAX_ROWS
        ),
    })?;
    let labels: BTreeMap<String, String> = labels.into_iter().collect();
    let mut days: BTreeMap<&str, Vec<&usage::UsageRow>> = BTreeMap::new();
    for r in &rows {
        if let Some(k) = r.keys.first() {
            days.entry(k.as_str()).or_default().push(r);
        }
    }
    let mut by_key: BTreeMap<String, Vec<ColonyRun>> = BTreeMap::new();
    for r in runs {
        by_key.entry(r.colony_key).or_default().push(r.run);
    }
    let mut colonies: Vec<ColonyBody> = by_key
        .into_iter()
        .map(|(key, runs)| {
            let mut totals = Usage::default();
            let colony_days = days
                .get(key.as_str())
                .into_iter()
                .flatten()
                .map(|r| {
                    totals.add(&r.usage);
                    ColonyDay {
                        bucket: r
                            .bucket
                            .map(|b| b.with_timezone(&q.tz).to_rfc3339())
                            .unwrap_or_default(),
                        sums: UsageSums::from(&r.usage),
                    }
                })
                .collect();
            body(key, runs, colony_days, &totals, &labels)
        })
        .collect();
    colonies.sort_by(|a, b| (b.last_seen_at, &a.colony_key).cmp(&(a.last_seen_at, &b.colony_key)));
    Ok(ColonyList {
        from: q.from.with_timezone(&q.tz).to_rfc3339(),
        to: q.to.with_timezone(&q.tz).to_rfc3339(),
        tz: q.tz.name().to_string(),
        colonies,
    })
}

fn body(
    key: String,
    runs: Vec<ColonyRun>,
    days: Vec<ColonyDay>,
    totals: &Usage,
    labels: &BTreeMap<String, String>,
) -> ColonyBody {
    let first_seen_at = runs.iter().map(|r| r.created_at).min().unwrap_or_default();
    let last_seen_at = runs
        .iter()
        .map(|r| r.last_event_at.unwrap_or(r.created_at).max(r.created_at))
        .max()
        .unwrap_or_default();
    let mut own: Vec<&str> = runs.iter().map(|r| r.session_id.as_str()).collect();
    own.sort_unstable();
    own.dedup();
    let workers = runs.iter().map(|r| r.workers).sum();
    let name = runs
        .iter()
        .filter(|r| r.colony_name.is_some())
        .max_by_key(|r| r.created_at)
        .and_then(|r| r.colony_name.clone());
    ColonyBody {
        label: labels.get(&key).cloned(),
        name,
        colony_key: key,
        first_seen_at,
        last_seen_at,
        sessions: own.len() as i64 + workers,
        workers,
        runs,
        days,
        totals: UsageSums::from(totals),
    }
}

/// True when `reader` may see the colony `key` (it has a run they may see).
pub async fn visible(db: &ReadDb, reader: &TenantRead, key: &str) -> Result<bool, ApiError> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM colony_runs WHERE tenant_id = $1 AND colony_key = $2
            AND ($3::text IS NULL OR user_id = $3))",
    )
    .bind(reader.tenant_id())
    .bind(key)
    .bind(reader.user())
    .fetch_one(&db.pool)
    .await?)
}

/// The query string of `GET /v1/colonies`: the usage range and zone, as `/v1/usage` reads them.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ColonyParams {
    /// RFC 3339 time or YYYY-MM-DD (local midnight in tz); on a 15-minute boundary. Default: `to` minus
    /// 30 days.
    #[serde(default, deserialize_with = "super::params::parsed")]
    #[param(value_type = Option<String>)]
    pub from: Option<usage::TimeArg>,
    /// Exclusive end, same forms. Default: the next 15-minute boundary.
    #[serde(default, deserialize_with = "super::params::parsed")]
    #[param(value_type = Option<String>)]
    pub to: Option<usage::TimeArg>,
    /// IANA zone of the days, e.g. Europe/Berlin. Default UTC.
    #[serde(default, deserialize_with = "super::params::parsed")]
    #[param(value_type = Option<String>)]
    pub tz: Option<usage::Zone>,
    /// `json` (the default) or `csv` (one line per colony, times in `tz`; see docs/exports.md). Without
    /// it, `Accept: text/csv` asks for CSV too.
    #[serde(default, deserialize_with = "super::params::parsed")]
    #[param(value_type = Option<usage::AnswerFormat>)]
    pub format: Option<usage::AnswerFormat>,
}

impl From<ColonyParams> for UsageParams {
    fn from(p: ColonyParams) -> UsageParams {
        UsageParams {
            from: p.from,
            to: p.to,
            tz: p.tz,
            ..UsageParams::default()
        }
    }
}

/// A label's longest length, in characters.
pub const MAX_LABEL_CHARS: usize = 100;

/// The body of `PUT /v1/colonies/{key}/label`.
#[derive(Debug, Clone, serde::Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ColonyLabel {
    /// 1 to 100 characters, one line, no control characters; leading and trailing spaces are removed.
    pub label: String,
}

impl ColonyLabel {
    /// The label trimmed, or why it is refused.
    pub fn checked(&self) -> Result<String, String> {
        let label = self.label.trim();
        if label.is_empty() {
            return Err("the label is empty".into());
        }
        if label.chars().count() > MAX_LABEL_CHARS {
            return Err(format!(
                "the label is longer than {MAX_LABEL_CHARS} characters"
            ));
        }
        if label.chars().any(char::is_control) {
            return Err("the label holds a control character (a line break, a tab, ...)".into());
        }
        Ok(label.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(s: &str) -> Result<String, String> {
        ColonyLabel { label: s.into() }.checked()
    }

    #[test]
    fn labels_are_one_short_line() {
        assert_eq!(check("  Billing refactor  "), Ok("Billing refactor".into()));
        assert_eq!(check("Über-Kolonie ✓"), Ok("Über-Kolonie ✓".into()));
        assert!(check("").is_err() && check("   ").is_err());
        assert!(check("two\nlines").is_err() && check("tab\there").is_err());
        assert!(check(&"x".repeat(MAX_LABEL_CHARS)).is_ok());
        assert!(check(&"x".repeat(MAX_LABEL_CHARS + 1)).is_err());
    }
}
