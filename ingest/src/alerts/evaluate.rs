//! Rule evaluation: for each rule of a tenant, the episodes whose condition holds now; a new one is an
//! alert `firing` (plus its notification), a firing alert whose episode no longer holds is `resolved`
//! (plus its notification) — all in one transaction under the tenant's advisory lock.

use apiary_schema::alert::{AlertBody, AlertNotification, AlertState};
use apiary_schema::status::Status;
use chrono::{DateTime, Datelike, NaiveTime, TimeDelta, Utc, Weekday};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::RuleKind;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::sessions::list::ListFilter;
use crate::query::ReadDb;

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

type RuleRow = (
    String,
    String,
    Option<String>,
    String,
    Option<String>,
    Option<Vec<String>>,
    i64,
    Option<i64>,
    Option<i64>,
    DateTime<Utc>,
);

pub const RULE_COLUMNS: &str = "rule_id, kind, name, destination_id, budget_id, statuses, \
    min_duration_secs, backlog_events, silence_hours, created_at";

/// A stored row as a rule (None, with a warning, for one that no longer parses).
pub fn rule(r: RuleRow) -> Option<Rule> {
    let (rule_id, kind, name, destination_id, budget_id, statuses, min, backlog, silence, created) =
        r;
    let Some(kind) = RuleKind::parse(&kind) else {
        tracing::warn!(%rule_id, "stored alert rule has an unknown kind; skipped");
        return None;
    };
    let statuses = statuses
        .unwrap_or_default()
        .iter()
        .filter_map(|s| serde_json::from_value(Value::String(s.clone())).ok())
        .collect();
    Some(Rule {
        rule_id,
        kind,
        name,
        destination_id,
        budget_id,
        statuses,
        min_duration_secs: min,
        backlog_events: backlog,
        silence_hours: silence,
        created_at: created,
    })
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

/// One condition holding now.
#[derive(Debug, Clone)]
struct Episode {
    /// Names the episode: the same stretch always gives the same key.
    key: String,
    subject: String,
    summary: String,
    details: Value,
}

/// Evaluates every tenant that has rules.
pub async fn all(pool: &PgPool, db: &ReadDb, offline_after_secs: i64) -> Result<(), ApiError> {
    let tenants: Vec<(Uuid,)> = sqlx::query_as("SELECT DISTINCT tenant_id FROM alert_rules")
        .fetch_all(pool)
        .await?;
    for (tenant_id,) in tenants {
        if let Err(e) = tenant(pool, db, tenant_id, offline_after_secs, Utc::now()).await {
            tracing::warn!(%tenant_id, error = %e, "alert evaluation of a tenant failed");
        }
    }
    Ok(())
}

/// What one evaluation changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Changes {
    pub fired: usize,
    pub resolved: usize,
    /// False when another replica held the tenant's lock (nothing was evaluated).
    pub evaluated: bool,
}

/// Evaluates one tenant's rules at `now`, unless another replica is at it.
pub async fn tenant(
    pool: &PgPool,
    db: &ReadDb,
    tenant_id: Uuid,
    offline_after_secs: i64,
    now: DateTime<Utc>,
) -> Result<Changes, ApiError> {
    let mut tx = pool.begin().await?;
    let (locked,): (bool,) = sqlx::query_as(
        "SELECT pg_try_advisory_xact_lock(hashtext('apiary-alerts'), hashtext($1::text))",
    )
    .bind(tenant_id)
    .fetch_one(&mut *tx)
    .await?;
    if !locked {
        return Ok(Changes::default());
    }
    let mut changes = Changes {
        evaluated: true,
        ..Changes::default()
    };
    for rule in rules(&mut tx, tenant_id).await? {
        let firing = firing_episodes(&mut tx, tenant_id, &rule.rule_id).await?;
        let current = match rule.kind {
            RuleKind::Budget => budget(&mut tx, tenant_id, &rule, now).await?,
            RuleKind::SessionStatus => sessions(db, tenant_id, &rule, now).await?,
            RuleKind::DeviceOffline => {
                devices(&mut tx, tenant_id, &rule, &firing, offline_after_secs, now).await?
            }
            RuleKind::Silence => silence(&mut tx, tenant_id, &rule, now).await?,
        };
        for e in &current {
            if fire(&mut tx, tenant_id, &rule, e).await? {
                changes.fired += 1;
            }
        }
        let holding: Vec<String> = current.into_iter().map(|e| e.key).collect();
        changes.resolved += resolve(&mut tx, tenant_id, &rule, &holding).await?;
    }
    tx.commit().await?;
    Ok(changes)
}

async fn firing_episodes(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rule_id: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT episode FROM alerts WHERE tenant_id = $1 AND rule_id = $2 AND state = 'firing'",
    )
    .bind(tenant_id)
    .bind(rule_id)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|(e,)| e).collect())
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Inserts the alert of a new episode and its `firing` notification; false when the episode has fired
/// before.
async fn fire(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rule: &Rule,
    e: &Episode,
) -> Result<bool, sqlx::Error> {
    let alert_id = format!("al_{}", Uuid::new_v4().simple());
    let inserted: Option<(DateTime<Utc>,)> = sqlx::query_as(
        "INSERT INTO alerts (tenant_id, alert_id, rule_id, episode, subject, state, summary, details)
         VALUES ($1, $2, $3, $4, $5, 'firing', $6, $7)
         ON CONFLICT (tenant_id, rule_id, episode) DO NOTHING
         RETURNING fired_at",
    )
    .bind(tenant_id)
    .bind(&alert_id)
    .bind(&rule.rule_id)
    .bind(&e.key)
    .bind(&e.subject)
    .bind(&e.summary)
    .bind(&e.details)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((fired_at,)) = inserted else {
        return Ok(false);
    };
    let alert = AlertBody {
        alert_id: alert_id.clone(),
        rule_id: rule.rule_id.clone(),
        rule_name: rule.name.clone(),
        kind: rule.kind,
        state: AlertState::Firing,
        subject: e.subject.clone(),
        summary: e.summary.clone(),
        details: e.details.clone(),
        fired_at,
        resolved_at: None,
    };
    notify(
        conn,
        rule,
        AlertNotification::new(tenant_id, alert, AlertState::Firing),
    )
    .await?;
    tracing::info!(%tenant_id, rule_id = %rule.rule_id, %alert_id, summary = %e.summary, "alert firing");
    Ok(true)
}

/// Queues `n` for the rule's destination (stored as is, so every retry sends the same bytes to sign).
async fn notify(
    conn: &mut PgConnection,
    rule: &Rule,
    n: AlertNotification,
) -> Result<(), sqlx::Error> {
    let payload = serde_json::to_value(&n).expect("a notification serialises");
    sqlx::query(
        "INSERT INTO notifications (tenant_id, notification_id, alert_id, destination_id, event,
                                    idempotency_key, payload)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (tenant_id, idempotency_key) DO NOTHING",
    )
    .bind(n.tenant_id)
    .bind(format!("nt_{}", Uuid::new_v4().simple()))
    .bind(&n.alert.alert_id)
    .bind(&rule.destination_id)
    .bind(n.event.as_str())
    .bind(&n.idempotency_key)
    .bind(payload)
    .execute(conn)
    .await?;
    Ok(())
}

/// Resolves the rule's firing alerts whose episode no longer holds; how many.
async fn resolve(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rule: &Rule,
    holding: &[String],
) -> Result<usize, sqlx::Error> {
    type Resolved = (String, String, String, Value, DateTime<Utc>, DateTime<Utc>);
    let rows: Vec<Resolved> = sqlx::query_as(
        "UPDATE alerts SET state = 'resolved', resolved_at = now()
         WHERE tenant_id = $1 AND rule_id = $2 AND state = 'firing' AND NOT (episode = ANY($3))
         RETURNING alert_id, subject, summary, details, fired_at, resolved_at",
    )
    .bind(tenant_id)
    .bind(&rule.rule_id)
    .bind(holding)
    .fetch_all(&mut *conn)
    .await?;
    for (alert_id, subject, summary, details, fired_at, resolved_at) in &rows {
        let alert = AlertBody {
            alert_id: alert_id.clone(),
            rule_id: rule.rule_id.clone(),
            rule_name: rule.name.clone(),
            kind: rule.kind,
            state: AlertState::Resolved,
            subject: subject.clone(),
            summary: summary.clone(),
            details: details.clone(),
            fired_at: *fired_at,
            resolved_at: Some(*resolved_at),
        };
        notify(
            conn,
            rule,
            AlertNotification::new(tenant_id, alert, AlertState::Resolved),
        )
        .await?;
        tracing::info!(%tenant_id, rule_id = %rule.rule_id, %alert_id, "alert resolved");
    }
    Ok(rows.len())
}

/// Budget crossings of the current periods (of the rule's budget, or of any).
async fn budget(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rule: &Rule,
    now: DateTime<Utc>,
) -> Result<Vec<Episode>, sqlx::Error> {
    type Row = (
        String,
        Option<String>,
        String,
        String,
        DateTime<Utc>,
        DateTime<Utc>,
        i32,
        i64,
        i64,
        DateTime<Utc>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT c.budget_id, b.name, b.unit, b.period, c.period_start, c.period_end,
                c.threshold_percent, c.spent, c.limit_amount, c.crossed_at
         FROM budget_crossings c JOIN budgets b USING (tenant_id, budget_id)
         WHERE c.tenant_id = $1 AND ($2::text IS NULL OR c.budget_id = $2) AND c.period_end > $3
         ORDER BY c.budget_id, c.period_start, c.threshold_percent",
    )
    .bind(tenant_id)
    .bind(&rule.budget_id)
    .bind(now)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(id, name, unit, period, start, end, threshold, spent, limit, crossed_at)| {
                let amount = |n: i64| {
                    if unit == "usd" {
                        format!("{} USD", apiary_schema::prices::format_rate(n))
                    } else {
                        format!("{n} tokens")
                    }
                };
                let label = name.clone().unwrap_or_else(|| id.clone());
                Episode {
                    key: format!("budget:{id}:{}:{threshold}", start.timestamp()),
                    subject: id.clone(),
                    summary: format!(
                        "Budget \"{label}\" reached {threshold}% of its {period}ly limit: {} of {} (period from {})",
                        amount(spent),
                        amount(limit),
                        rfc3339(start)
                    ),
                    details: json!({
                        "budget_id": id, "budget_name": name, "threshold_percent": threshold,
                        "unit": unit, "spent": spent, "limit": limit, "period": period,
                        "period_start": rfc3339(start), "period_end": rfc3339(end),
                        "crossed_at": rfc3339(crossed_at),
                    }),
                }
            },
        )
        .collect())
}

/// Most sessions a status rule looks at per evaluation (the most recently active first).
const SESSIONS_MAX: usize = 1000;

/// Sessions in one of the rule's statuses for at least its minimum duration.
async fn sessions(
    db: &ReadDb,
    tenant_id: Uuid,
    rule: &Rule,
    now: DateTime<Utc>,
) -> Result<Vec<Episode>, ApiError> {
    if rule.statuses.is_empty() {
        return Ok(vec![]);
    }
    let filter = ListFilter {
        user: None,
        device: None,
        colony: None,
        since: Some(now - TimeDelta::days(7)),
        statuses: Some(rule.statuses.clone()),
        limit: SESSIONS_MAX,
        after: None,
    };
    let read = TenantRead::tenant_wide(tenant_id);
    let (rows, _) = crate::query::sessions::list::list(db, &read, &filter, now, db.rules()).await?;
    let mut out = vec![];
    for r in rows {
        let view = r.view(now, db.rules());
        let Some(since) = view.since else { continue };
        let held = (now - since).num_seconds();
        if held < rule.min_duration_secs {
            continue;
        }
        let status = serde_json::to_value(view.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        out.push(Episode {
            key: format!(
                "session:{}:{status}:{}",
                r.session_id,
                since.timestamp_millis()
            ),
            subject: r.session_id.clone(),
            summary: format!(
                "Session {} is {status} (since {}, cause: {})",
                r.session_id,
                rfc3339(since),
                view.cause
            ),
            details: json!({
                "session_id": r.session_id, "status": status, "since": rfc3339(since),
                "cause": view.cause, "user_id": r.user_id, "device_id": r.device_id,
            }),
        });
    }
    Ok(out)
}

/// Devices not heard from for `offline_after_secs` (within the last week), or with a backlog at or above
/// the rule's.
async fn devices(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rule: &Rule,
    firing: &[String],
    offline_after_secs: i64,
    now: DateTime<Utc>,
) -> Result<Vec<Episode>, sqlx::Error> {
    type Row = (String, String, DateTime<Utc>, Option<i64>, Option<String>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT device_id, user_id, GREATEST(last_heartbeat_at, last_seen_at), backlog_events, agent_version
         FROM devices
         WHERE tenant_id = $1 AND GREATEST(last_heartbeat_at, last_seen_at) >= $2
         ORDER BY device_id",
    )
    .bind(tenant_id)
    .bind(now - TimeDelta::days(7))
    .fetch_all(conn)
    .await?;
    let offline_after = TimeDelta::seconds(offline_after_secs);
    let mut out = vec![];
    for (device, user, heard, backlog, version) in rows {
        if now - heard >= offline_after {
            out.push(Episode {
                key: format!("offline:{device}:{}", heard.timestamp_millis()),
                subject: device.clone(),
                summary: format!("Device {device} is offline: last heard {}", rfc3339(heard)),
                details: json!({
                    "device_id": device, "user_id": user, "last_heard_at": rfc3339(heard),
                    "backlog_events": backlog, "agent_version": version,
                }),
            });
        } else if let (Some(limit), Some(b)) = (rule.backlog_events, backlog) {
            if b >= limit {
                // One episode while the backlog stays high: keep the firing one's key.
                let prefix = format!("backlog:{device}:");
                let key = firing
                    .iter()
                    .find(|k| k.starts_with(&prefix))
                    .cloned()
                    .unwrap_or_else(|| format!("{prefix}{}", now.timestamp_millis()));
                out.push(Episode {
                    key,
                    subject: device.clone(),
                    summary: format!(
                        "Device {device} has {b} events waiting to be sent (limit {limit})"
                    ),
                    details: json!({
                        "device_id": device, "user_id": user, "last_heard_at": rfc3339(heard),
                        "backlog_events": b, "backlog_limit": limit, "agent_version": version,
                    }),
                });
            }
        }
    }
    Ok(out)
}

/// The start (midnight UTC) of the fifth working day (Monday to Friday) before `now`'s day.
pub fn working_days_back(now: DateTime<Utc>, n: usize) -> DateTime<Utc> {
    let mut day = now.date_naive();
    let mut seen = 0;
    while seen < n {
        day = day.pred_opt().expect("in range");
        if !matches!(day.weekday(), Weekday::Sat | Weekday::Sun) {
            seen += 1;
        }
    }
    day.and_time(NaiveTime::MIN).and_utc()
}

/// Devices active (usage) on at least two of the last five working days that have sent nothing for
/// the rule's hours.
async fn silence(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rule: &Rule,
    now: DateTime<Utc>,
) -> Result<Vec<Episode>, sqlx::Error> {
    let hours = rule.silence_hours.unwrap_or(24);
    let today = now.date_naive().and_time(NaiveTime::MIN).and_utc();
    let from = working_days_back(now, 5);
    type Row = (String, String, DateTime<Utc>, i64);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT d.device_id, d.user_id, GREATEST(d.last_heartbeat_at, d.last_seen_at) AS heard,
                (SELECT count(DISTINCT (r.bucket AT TIME ZONE 'UTC')::date) FROM usage_rollups_hourly r
                  WHERE r.tenant_id = d.tenant_id AND r.device_id = d.device_id
                    AND r.bucket >= $2 AND r.bucket < $3 AND r.events > 0
                    AND extract(isodow FROM r.bucket AT TIME ZONE 'UTC') < 6) AS active_days
         FROM devices d
         WHERE d.tenant_id = $1 AND GREATEST(d.last_heartbeat_at, d.last_seen_at) < $4
           AND GREATEST(d.last_heartbeat_at, d.last_seen_at) >= $2
         ORDER BY d.device_id",
    )
    .bind(tenant_id)
    .bind(from)
    .bind(today)
    .bind(now - TimeDelta::hours(hours))
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|r| r.3 >= 2)
        .map(|(device, user, heard, days)| Episode {
            key: format!("silence:{device}:{}", heard.timestamp_millis()),
            subject: device.clone(),
            summary: format!(
                "Device {device} was active on {days} of the last 5 working days but has sent nothing since {} (telemetry may have stopped)",
                rfc3339(heard)
            ),
            details: json!({
                "device_id": device, "user_id": user, "last_heard_at": rfc3339(heard),
                "active_working_days": days, "silence_hours": hours,
            }),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_days_skip_weekends() {
        // Thursday 26 November 2026: the five working days before it start on Thursday the 19th.
        let now: DateTime<Utc> = "2026-11-26T10:00:00Z".parse().unwrap();
        assert_eq!(
            working_days_back(now, 5),
            "2026-11-19T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        // Monday 30 November: back to Monday the 23rd.
        let now: DateTime<Utc> = "2026-11-30T10:00:00Z".parse().unwrap();
        assert_eq!(
            working_days_back(now, 5),
            "2026-11-23T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
    }
}
