//! Where alerts go and what fires them: `alert_destinations` and `alert_rules`; see [`crate::alerts`].
//!
//! - Every statement names its tenant (`tenant_id = $1`): one tenant's rows live on one Citus worker,
//!   and no id reaches another tenant's row.
//! - A tenant keeps at most `max` destinations and `max` rules: the bound is checked in the `INSERT`
//!   itself (two concurrent adds at the limit may both pass: it bounds cost, not an exact quota).
//! - A destination a rule sends to, or with a notification still pending, is never deleted; deleting
//!   a rule deletes its alerts and their notifications (`ON DELETE CASCADE`).
//! - A stored rule that no longer parses (an unknown kind: a hand edit) is skipped with a warning, not
//!   an error that would stop every rule of its tenant.

use apiary_schema::alert::RuleKind;
use apiary_schema::status::Status;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// A destination to store, checked by its caller.
#[derive(Debug, Clone, Copy)]
pub struct NewDestination<'a> {
    pub destination_id: &'a str,
    /// `webhook` or `slack`.
    pub kind: &'a str,
    /// The normalised URL.
    pub url: &'a str,
    pub secret: Option<&'a str>,
    pub name: Option<&'a str>,
}

/// Stores a destination; its creation time, or None (nothing stored) when the tenant already has
/// `max` destinations.
pub async fn insert_destination(
    pool: &PgPool,
    tenant_id: Uuid,
    d: NewDestination<'_>,
    max: i64,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO alert_destinations (tenant_id, destination_id, kind, url, secret, name)
         SELECT $1, $2, $3, $4, $5, $6
         WHERE (SELECT count(*) FROM alert_destinations WHERE tenant_id = $1) < $7
         RETURNING created_at",
    )
    .bind(tenant_id)
    .bind(d.destination_id)
    .bind(d.kind)
    .bind(d.url)
    .bind(d.secret)
    .bind(d.name)
    .bind(max)
    .fetch_optional(pool)
    .await
}

/// A stored destination, without its secret.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DestinationRow {
    pub destination_id: String,
    /// `webhook` or `slack`.
    pub kind: String,
    pub url: String,
    pub name: Option<String>,
    pub has_secret: bool,
    pub created_at: DateTime<Utc>,
}

/// The tenant's destinations, oldest first.
pub async fn destinations(
    pool: &PgPool,
    tenant_id: Uuid,
) -> Result<Vec<DestinationRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT destination_id, kind, url, name, secret IS NOT NULL AS has_secret, created_at
         FROM alert_destinations WHERE tenant_id = $1 ORDER BY created_at, destination_id",
    )
    .bind(tenant_id)
    .fetch_all(pool)
    .await
}

/// Whether the tenant has this destination.
pub async fn destination_exists(
    pool: &PgPool,
    tenant_id: Uuid,
    destination_id: &str,
) -> Result<bool, sqlx::Error> {
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM alert_destinations WHERE tenant_id = $1 AND destination_id = $2",
    )
    .bind(tenant_id)
    .bind(destination_id)
    .fetch_one(pool)
    .await?;
    Ok(n > 0)
}

/// How many of the tenant's rules send to this destination.
pub async fn rules_sending_to(
    pool: &PgPool,
    tenant_id: Uuid,
    destination_id: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM alert_rules WHERE tenant_id = $1 AND destination_id = $2",
    )
    .bind(tenant_id)
    .bind(destination_id)
    .fetch_one(pool)
    .await
}

/// Deletes a destination unless a notification to it is still pending; whether a row went.
pub async fn delete_destination(
    pool: &PgPool,
    tenant_id: Uuid,
    destination_id: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "DELETE FROM alert_destinations WHERE tenant_id = $1 AND destination_id = $2
           AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.tenant_id = $1 AND n.destination_id = $2 AND n.state = 'pending')",
    )
    .bind(tenant_id)
    .bind(destination_id)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// A rule as stored.
#[derive(Debug, Clone)]
pub struct Rule {
    pub rule_id: String,
    pub kind: RuleKind,
    pub name: Option<String>,
    pub destination_id: String,
    pub budget_id: Option<String>,
    pub statuses: Vec<Status>,
    pub min_duration_secs: i64,
    pub backlog_events: Option<i64>,
    pub silence_hours: Option<i64>,
    pub created_at: DateTime<Utc>,
}

/// A rule's row, as read ([`RULE_COLUMNS`]).
#[derive(Debug, sqlx::FromRow)]
struct RuleRow {
    rule_id: String,
    kind: String,
    name: Option<String>,
    destination_id: String,
    budget_id: Option<String>,
    statuses: Option<Vec<String>>,
    min_duration_secs: i64,
    backlog_events: Option<i64>,
    silence_hours: Option<i64>,
    created_at: DateTime<Utc>,
}

const RULE_COLUMNS: &str = "rule_id, kind, name, destination_id, budget_id, statuses, \
    min_duration_secs, backlog_events, silence_hours, created_at";

/// A stored row as a rule (None, with a warning, for one that no longer parses).
fn rule(r: RuleRow) -> Option<Rule> {
    let Some(kind) = RuleKind::parse(&r.kind) else {
        tracing::warn!(rule_id = %r.rule_id, "stored alert rule has an unknown kind; skipped");
        return None;
    };
    let statuses = r
        .statuses
        .unwrap_or_default()
        .iter()
        .filter_map(|s| serde_json::from_value(Value::String(s.clone())).ok())
        .collect();
    Some(Rule {
        rule_id: r.rule_id,
        kind,
        name: r.name,
        destination_id: r.destination_id,
        budget_id: r.budget_id,
        statuses,
        min_duration_secs: r.min_duration_secs,
        backlog_events: r.backlog_events,
        silence_hours: r.silence_hours,
        created_at: r.created_at,
    })
}

/// A rule to store, checked by its caller: the fields of its kind set, the others None.
#[derive(Debug, Clone, Copy)]
pub struct NewRule<'a> {
    pub rule_id: &'a str,
    pub kind: RuleKind,
    pub name: Option<&'a str>,
    pub destination_id: &'a str,
    pub budget_id: Option<&'a str>,
    /// session_status only.
    pub statuses: Option<&'a [String]>,
    pub min_duration_secs: i64,
    pub backlog_events: Option<i64>,
    pub silence_hours: Option<i64>,
}

/// Stores a rule: the rule as stored, or None (nothing stored) when the tenant already has `max` rules
/// (or, short of a hand edit never, when the stored row does not parse back).
pub async fn insert_rule(
    pool: &PgPool,
    tenant_id: Uuid,
    r: NewRule<'_>,
    max: i64,
) -> Result<Option<Option<Rule>>, sqlx::Error> {
    let row: Option<RuleRow> = sqlx::query_as(&format!(
        "INSERT INTO alert_rules (tenant_id, rule_id, kind, name, destination_id, budget_id, statuses,
                                  min_duration_secs, backlog_events, silence_hours)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10
         WHERE (SELECT count(*) FROM alert_rules WHERE tenant_id = $1) < $11
         RETURNING {RULE_COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(r.rule_id)
    .bind(r.kind.as_str())
    .bind(r.name)
    .bind(r.destination_id)
    .bind(r.budget_id)
    .bind(r.statuses)
    .bind(r.min_duration_secs)
    .bind(r.backlog_events)
    .bind(r.silence_hours)
    .bind(max)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(rule))
}

/// The tenant's rules, by id.
pub async fn rules(conn: &mut PgConnection, tenant_id: Uuid) -> Result<Vec<Rule>, sqlx::Error> {
    let rows: Vec<RuleRow> = sqlx::query_as(&format!(
        "SELECT {RULE_COLUMNS} FROM alert_rules WHERE tenant_id = $1 ORDER BY rule_id"
    ))
    .bind(tenant_id)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().filter_map(rule).collect())
}

/// Deletes a rule (its alerts and their notifications with it); whether a row went.
pub async fn delete_rule(
    pool: &PgPool,
    tenant_id: Uuid,
    rule_id: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM alert_rules WHERE tenant_id = $1 AND rule_id = $2")
        .bind(tenant_id)
        .bind(rule_id)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// The tenants that have rules (the evaluator's round).
pub async fn tenants_with_rules(pool: &PgPool) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar("SELECT DISTINCT tenant_id FROM alert_rules")
        .fetch_all(pool)
        .await
}
