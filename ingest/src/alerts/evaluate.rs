//! Rule evaluation: for each rule of a tenant, the episodes whose condition holds now; a new one is an
//! alert `firing` (plus its notification), a firing alert whose episode no longer holds is `resolved`
//! (plus its notification) — all in one transaction under the tenant's advisory lock.

use apiary_schema::alert::{
    AlertBody, AlertDetails, AlertNotification, AlertState, BudgetDetails, DeviceBacklogDetails,
    DeviceOfflineDetails, SessionStatusDetails, SilenceDetails,
};
use chrono::{DateTime, Datelike, NaiveTime, TimeDelta, Utc, Weekday};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::RuleKind;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::sessions::list::ListFilter;
use crate::query::ReadDb;
use crate::store::alert_rules::tenants_with_rules;
use crate::store::alerts::{self as store, NewAlert};

pub use crate::store::alert_rules::{rules, Rule};

/// One condition holding now.
#[derive(Debug, Clone)]
struct Episode {
    /// Names the episode: the same stretch always gives the same key.
    key: String,
    subject: String,
    summary: String,
    details: AlertDetails,
}

/// Evaluates every tenant that has rules.
pub async fn all(pool: &PgPool, db: &ReadDb, offline_after_secs: i64) -> Result<(), ApiError> {
    for tenant_id in tenants_with_rules(pool).await? {
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
    if !store::try_lock_tenant(&mut tx, tenant_id).await? {
        return Ok(Changes::default());
    }
    let mut changes = Changes {
        evaluated: true,
        ..Changes::default()
    };
    for rule in rules(&mut tx, tenant_id).await? {
        let firing = store::firing_episodes(&mut tx, tenant_id, &rule.rule_id).await?;
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
    let asked = NewAlert {
        alert_id: &alert_id,
        rule_id: &rule.rule_id,
        episode: &e.key,
        subject: &e.subject,
        summary: &e.summary,
        details: &e.details,
    };
    let Some(fired_at) = store::insert_alert(conn, tenant_id, asked).await? else {
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
    let n = AlertNotification::new(tenant_id, alert, AlertState::Firing);
    store::queue_notification(conn, &rule.destination_id, &n).await?;
    tracing::info!(%tenant_id, rule_id = %rule.rule_id, %alert_id, summary = %e.summary, "alert firing");
    Ok(true)
}

/// Resolves the rule's firing alerts whose episode no longer holds; how many.
async fn resolve(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rule: &Rule,
    holding: &[String],
) -> Result<usize, sqlx::Error> {
    let rows = store::resolve_alerts(conn, tenant_id, &rule.rule_id, holding).await?;
    for r in &rows {
        let alert_id = &r.alert_id;
        let alert = AlertBody {
            alert_id: alert_id.clone(),
            rule_id: rule.rule_id.clone(),
            rule_name: rule.name.clone(),
            kind: rule.kind,
            state: AlertState::Resolved,
            subject: r.subject.clone(),
            summary: r.summary.clone(),
            details: r.details.0.clone(),
            fired_at: r.fired_at,
            resolved_at: Some(r.resolved_at),
        };
        let n = AlertNotification::new(tenant_id, alert, AlertState::Resolved);
        store::queue_notification(conn, &rule.destination_id, &n).await?;
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
    let rows = store::current_crossings(conn, tenant_id, rule.budget_id.as_deref(), now).await?;
    Ok(rows
        .into_iter()
        .map(
            |store::CrossingRow {
                 budget_id: id,
                 name,
                 unit,
                 period,
                 period_start: start,
                 period_end: end,
                 threshold_percent: threshold,
                 spent,
                 limit_amount: limit,
                 crossed_at,
             }| {
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
                        "Budget \"{label}\" reached {threshold}% of its {} limit: {} of {} (period from {})",
                        per(&period),
                        amount(spent),
                        amount(limit),
                        rfc3339(start)
                    ),
                    details: AlertDetails::Budget(BudgetDetails {
                        budget_id: id.clone(),
                        budget_name: name.clone(),
                        threshold_percent: threshold,
                        unit: unit.clone(),
                        spent,
                        limit,
                        period: period.clone(),
                        period_start: start,
                        period_end: end,
                        crossed_at,
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
            details: AlertDetails::SessionStatus(SessionStatusDetails {
                session_id: r.session_id.clone(),
                status: status.clone(),
                since,
                cause: view.cause.clone(),
                user_id: r.user_id.clone(),
                device_id: r.device_id.clone(),
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
    let rows = store::devices_heard_since(conn, tenant_id, now - TimeDelta::days(7)).await?;
    let offline_after = TimeDelta::seconds(offline_after_secs);
    let mut out = vec![];
    for store::DeviceContact {
        device_id: device,
        user_id: user,
        heard,
        backlog_events: backlog,
        agent_version: version,
    } in rows
    {
        if now - heard >= offline_after {
            out.push(Episode {
                key: format!("offline:{device}:{}", heard.timestamp_millis()),
                subject: device.clone(),
                summary: format!("Device {device} is offline: last heard {}", rfc3339(heard)),
                details: AlertDetails::DeviceOffline(DeviceOfflineDetails {
                    device_id: device.clone(),
                    user_id: user,
                    last_heard_at: heard,
                    backlog_events: backlog,
                    agent_version: version,
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
                    details: AlertDetails::DeviceBacklog(DeviceBacklogDetails {
                        device_id: device.clone(),
                        user_id: user,
                        last_heard_at: heard,
                        backlog_events: b,
                        backlog_limit: limit,
                        agent_version: version,
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
    let quiet_since = now - TimeDelta::hours(hours);
    let rows = store::quiet_devices(conn, tenant_id, from, today, quiet_since).await?;
    Ok(rows
        .into_iter()
        .filter(|r| r.active_days >= 2)
        .map(|r| (r.device_id, r.user_id, r.heard, r.active_days))
        .map(|(device, user, heard, days)| Episode {
            key: format!("silence:{device}:{}", heard.timestamp_millis()),
            subject: device.clone(),
            summary: format!(
                "Device {device} was active on {days} of the last 5 working days but has sent nothing since {} (telemetry may have stopped)",
                rfc3339(heard)
            ),
            details: AlertDetails::Silence(SilenceDetails {
                device_id: device.clone(),
                user_id: user,
                last_heard_at: heard,
                active_working_days: days,
                silence_hours: hours,
            }),
        })
        .collect())
}

/// A budget's period as its limit is named: "daily", "weekly", "monthly" (a period not known here, as
/// stored).
fn per(period: &str) -> &str {
    match period {
        "day" => "daily",
        "week" => "weekly",
        "month" => "monthly",
        other => other,
    }
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

    #[test]
    fn a_budgets_limit_is_named_after_its_period() {
        assert_eq!(
            ["day", "week", "month"].map(per),
            ["daily", "weekly", "monthly"]
        );
    }

    #[test]
    fn times_in_summaries_are_utc_rfc3339_with_the_fraction_they_have() {
        let t: DateTime<Utc> = "2026-11-30T10:00:00Z".parse().unwrap();
        assert_eq!(rfc3339(t), "2026-11-30T10:00:00Z");
        assert_eq!(
            rfc3339(t + TimeDelta::milliseconds(250)),
            "2026-11-30T10:00:00.250Z"
        );
    }
}
