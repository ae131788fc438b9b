//! Writes of the live stream (`stream_events`, see the migration `20261127000000_live_stream.sql` and
//! [`crate::stream`]): in a batch's transaction ([`write_batch`], so a rolled-back batch streams
//! nothing), and by the ingest's upkeep ([`flush_usage`], [`sweep_devices`], [`prune`]), which any
//! replica may run at any time.
//!
//! - Order: each row's `xid` is `GREATEST(pg_current_xact_id(), entity.last_xid)`, and the entity's
//!   `last_xid` is set to it, under the entity's row lock (`stream_sessions`, `stream_devices`): two
//!   writers of one session stream in the order they committed, even when the later one holds the lower
//!   transaction id. Readers deliver a row only once its `xid` is below their snapshot's xmin.
//! - Usage: a session's new **totals** (not the delta: a total can be delivered twice or merged without
//!   double counting), at most once a second per session. A batch within a second of the session's last
//!   usage row marks it due instead; [`flush_usage`] writes it when due.
//! - Devices: a live batch (over HTTP) from a device the stream last announced offline (or never)
//!   streams `online: true`; [`sweep_devices`] streams `online: false` once nothing was heard for
//!   `offline_after_secs` (the rule of `GET /v1/devices`), within the sweep interval.
//! - Lock order: these run last in a batch (after `devices`), sessions sorted by (tenant, id), then the
//!   devices (by tenant and id), for all the tenants of a group at once ([`write_batches`]). The
//!   upkeep claims its rows with `SKIP LOCKED`, so it never waits for a batch, and a batch waits for it
//!   only the length of one short statement.
//! - Every transaction that wrote a row sends `NOTIFY apiary_stream` (delivered at commit).
//! - Citus: the transaction id is read once per transaction ([`own_xid`], on the coordinator) and bound
//!   into the statements, never computed inside one that runs on a worker; the upkeep claims one
//!   tenant at a time, in a transaction of its own (a `FOR UPDATE` over every tenant is a multi-shard
//!   query Citus refuses, and one tenant's rows live on one worker, so each transaction stays there).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

/// The channel every replica's stream reader listens on.
pub const CHANNEL: &str = "apiary_stream";

/// Rows older than this are pruned; a resume from before it is told to reload.
pub const RETENTION: chrono::Duration = chrono::Duration::hours(24);

/// A status transition as the stream carries it (`event: status`).
#[derive(Debug, Clone, Serialize)]
pub struct StatusData {
    pub session_id: String,
    pub seq: i64,
    pub at: DateTime<Utc>,
    pub from: Option<&'static str>,
    pub to: &'static str,
    pub cause: String,
}

/// What a batch streams.
#[derive(Debug, Default, Clone)]
pub struct BatchStream<'a> {
    /// Transitions written by the batch, in (session, seq) order.
    pub transitions: Vec<StatusData>,
    /// Sessions with new usage (runtime events).
    pub usage: Vec<&'a str>,
    /// The sending devices with their senders' users (the device rows written; sorted, distinct), when
    /// their batches came over HTTP (they are live).
    pub devices: Vec<(&'a str, &'a str)>,
}

/// The usage columns as a JSON object of totals (exact sums as numbers; `cost_usd` for display): the
/// fields of [`apiary_schema::usage::StreamUsage`] but `session_id`.
const USAGE_JSON: &str = "jsonb_build_object('input_tokens', sum(r.input_tokens),
    'output_tokens', sum(r.output_tokens), 'cached_tokens', sum(r.cached_tokens),
    'cache_creation_tokens', sum(r.cache_creation_tokens), 'cost_nanos', sum(r.cost_nanos),
    'cost_usd', (sum(r.cost_nanos) / 1e9)::float8, 'unpriced_turns', sum(r.unpriced_turns),
    'cost_reported_nanos', sum(r.cost_reported_nanos), 'cost_estimated_nanos', sum(r.cost_estimated_nanos),
    'estimated_turns', sum(r.estimated_turns),
    'llm_calls', sum(r.llm_calls), 'tool_calls', sum(r.tool_calls), 'tool_errors', sum(r.tool_errors),
    'tool_duration_ms', sum(r.tool_duration_ms), 'events', sum(r.events),
    'active_seconds', (sum(r.active_ms) / 1e3)::float8)";

/// What the stream writes of one transaction share across its tenants: the transaction's id (read
/// once, on first need) and whether anything was written (one `pg_notify` at the end, [`Self::finish`]).
#[derive(Debug, Default)]
pub struct TxStream {
    xid: Option<i64>,
    wrote: u64,
}

impl TxStream {
    async fn xid(&mut self, tx: &mut Transaction<'_, Postgres>) -> Result<i64, sqlx::Error> {
        match self.xid {
            Some(x) => Ok(x),
            None => {
                let x = own_xid(tx).await?;
                self.xid = Some(x);
                Ok(x)
            }
        }
    }

    /// Wakes the stream's listeners when the transaction wrote stream rows (they see them at commit).
    pub async fn finish(self, tx: &mut Transaction<'_, Postgres>) -> Result<(), sqlx::Error> {
        if self.wrote > 0 {
            notify(&mut **tx).await?;
        }
        Ok(())
    }
}

/// A session's usage totals (`totals`, [`USAGE_JSON`]) as a LATERAL subquery of a row `s` (with
/// `tenant_id` and `session_id`); no row when the session has no usage rows. Per session, through the
/// `(tenant_id, session_id)` index: as a plain join grouped afterwards, a generic plan made while the
/// tables were small scanned every usage row of the tenant for each batch (seen at 250–580 ms per
/// statement under the fleet bench). Joined on `s.tenant_id` (Citus plans a join of co-located tables
/// only on their distribution column) and bound to `tenant` (the statement's tenant filter) as well:
/// without that, Citus does not prune the correlated subquery's shards and runs the statement on every
/// shard of both tables — every worker joined each batch's transaction, and now and then one of them
/// was made a two-phase commit participant (the Citus suite's one-worker-per-transaction test failed
/// about one run in four).
fn session_totals(tenant: &str) -> String {
    format!(
        "SELECT {USAGE_JSON} AS totals FROM usage_rollups r
         WHERE r.tenant_id = s.tenant_id AND r.tenant_id {tenant} AND r.session_id = s.session_id
         HAVING count(*) > 0"
    )
}

/// One tenant's part of what a transaction streams.
pub struct TenantStream<'a> {
    pub tenant_id: Uuid,
    /// Each session's user.
    pub owners: BTreeMap<&'a str, &'a str>,
    pub stream: BatchStream<'a>,
}

/// Streams what the batches of a transaction changed, for all its tenants (`tenants` sorted by id and
/// distinct) in one statement per kind of row, rows in (tenant, key) order (`t` holds what the
/// transaction shares; call [`TxStream::finish`] before the commit).
pub async fn write_batches(
    tx: &mut Transaction<'_, Postgres>,
    t: &mut TxStream,
    tenants: &[TenantStream<'_>],
) -> Result<(), sqlx::Error> {
    // (tenant, session) → whether its usage changed; sorted.
    let mut sessions: BTreeMap<(Uuid, &str), bool> = BTreeMap::new();
    let mut devices: Vec<(Uuid, &str, &str)> = Vec::new();
    for ts in tenants {
        for x in &ts.stream.transitions {
            sessions
                .entry((ts.tenant_id, x.session_id.as_str()))
                .or_insert(false);
        }
        for u in &ts.stream.usage {
            sessions.insert((ts.tenant_id, u), true);
        }
        devices.extend(
            ts.stream
                .devices
                .iter()
                .map(|(d, u)| (ts.tenant_id, *d, *u)),
        );
    }
    if sessions.is_empty() && devices.is_empty() {
        return Ok(());
    }
    let owner = |tenant: Uuid, session: &str| -> &str {
        tenants
            .iter()
            .find(|ts| ts.tenant_id == tenant)
            .and_then(|ts| ts.owners.get(session).copied())
            .unwrap_or("")
    };
    let xid = t.xid(tx).await?;
    let mut wrote = 0;
    if !sessions.is_empty() {
        let ids: Vec<Uuid> = sessions.keys().map(|k| k.0).collect();
        let sids: Vec<&str> = sessions.keys().map(|k| k.1).collect();
        let users: Vec<&str> = sessions.keys().map(|k| owner(k.0, k.1)).collect();
        let has_usage: Vec<bool> = sessions.values().copied().collect();
        // Each session's stream position, and whether its usage goes out now. The conflict branch
        // and RETURNING read "now" as `touched_at`, which the row gets from the SELECT's now(), and
        // add seconds with the immutable `apiary_add_seconds`: Citus refuses functions that are not
        // immutable in DO UPDATE SET (`timestamptz - interval` and now() are only stable).
        let rows: Vec<(Uuid, String, i64, bool)> = sqlx::query_as(
            "INSERT INTO stream_sessions AS s (tenant_id, session_id, user_id, last_xid, touched_at,
                 usage_sent_at)
             SELECT u.t, u.id, u.usr, $5, now(),
                 CASE WHEN u.usage THEN now() END
             FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bool[]) AS u(t, id, usr, usage)
             ORDER BY u.t, u.id
             ON CONFLICT (tenant_id, session_id) DO UPDATE SET
                 last_xid = GREATEST(s.last_xid, EXCLUDED.last_xid),
                 touched_at = EXCLUDED.touched_at,
                 usage_due_at = CASE
                     WHEN EXCLUDED.usage_sent_at IS NULL THEN s.usage_due_at
                     WHEN s.usage_sent_at > apiary_add_seconds(EXCLUDED.touched_at, -1)
                         THEN COALESCE(s.usage_due_at, apiary_add_seconds(s.usage_sent_at, 1))
                     ELSE NULL END,
                 usage_sent_at = CASE
                     WHEN EXCLUDED.usage_sent_at IS NULL
                         OR s.usage_sent_at > apiary_add_seconds(EXCLUDED.touched_at, -1)
                         THEN s.usage_sent_at
                     ELSE EXCLUDED.usage_sent_at END
             RETURNING tenant_id, session_id, last_xid,
                 usage_sent_at IS NOT DISTINCT FROM touched_at AND usage_due_at IS NULL",
        )
        .bind(&ids)
        .bind(&sids)
        .bind(&users)
        .bind(&has_usage)
        .bind(xid)
        .fetch_all(&mut **tx)
        .await?;
        let xid_of: BTreeMap<(Uuid, &str), i64> =
            rows.iter().map(|r| ((r.0, r.1.as_str()), r.2)).collect();
        let mut transitions = Vec::new();
        for ts in tenants {
            for x in &ts.stream.transitions {
                let at = xid_of
                    .get(&(ts.tenant_id, x.session_id.as_str()))
                    .copied()
                    .unwrap_or(0);
                transitions.push((ts.tenant_id, at, owner(ts.tenant_id, &x.session_id), x));
            }
        }
        wrote += write_status(tx, &transitions).await?;
        let usage_now: Vec<(Uuid, &str)> = rows
            .iter()
            .filter(|r| r.3 && sessions.get(&(r.0, r.1.as_str())) == Some(&true))
            .map(|r| (r.0, r.1.as_str()))
            .collect();
        wrote += write_usage(tx, &usage_now).await?;
    }
    if !devices.is_empty() {
        wrote += device_online(tx, &devices, xid).await?;
    }
    t.wrote += wrote;
    Ok(())
}

/// The transitions (tenant, stream position, user, transition), in order.
async fn write_status(
    tx: &mut Transaction<'_, Postgres>,
    transitions: &[(Uuid, i64, &str, &StatusData)],
) -> Result<u64, sqlx::Error> {
    if transitions.is_empty() {
        return Ok(0);
    }
    let n = transitions.len();
    let (mut ids, mut xids, mut users, mut data) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (tenant, xid, user, t) in transitions {
        ids.push(*tenant);
        xids.push(*xid);
        users.push(*user);
        data.push(serde_json::to_string(t).expect("a transition serialises"));
    }
    let done = sqlx::query(
        "INSERT INTO stream_events (tenant_id, xid, kind, user_id, data)
         SELECT u.t, u.xid, 'status', u.usr, u.data::jsonb
         FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::text[]) WITH ORDINALITY
             AS u(t, xid, usr, data, n)
         ORDER BY u.n",
    )
    .bind(&ids)
    .bind(&xids)
    .bind(&users)
    .bind(&data)
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected())
}

/// `tenant_id` filter of a statement that reads distributed tables, with the tenants as parameter `$n`:
/// `= $n` for one tenant — Citus routes that to the tenant's shard (it does not prune on `= ANY` of a
/// parameter, and a group on Citus has one tenant) — and `= ANY($n)` for several.
fn tenant_in(tenants: &[Uuid], n: u8) -> String {
    if tenants.len() == 1 {
        format!("= ${n}")
    } else {
        format!("= ANY(${n})")
    }
}

/// Binds the tenants as [`tenant_in`] names them.
fn bind_tenants<'q>(
    q: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
    tenants: &'q [Uuid],
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    if tenants.len() == 1 {
        q.bind(tenants[0])
    } else {
        q.bind(tenants)
    }
}

/// The sessions' usage totals (this transaction's rollups included), at their stream positions; one
/// statement for all the group's tenants (`sessions` sorted), rows in (tenant, session) order.
async fn write_usage(
    tx: &mut Transaction<'_, Postgres>,
    sessions: &[(Uuid, &str)],
) -> Result<u64, sqlx::Error> {
    if sessions.is_empty() {
        return Ok(0);
    }
    let (ids, sids): (Vec<Uuid>, Vec<&str>) = sessions.iter().copied().unzip();
    let mut tenants = ids.clone();
    tenants.dedup();
    let tenant = tenant_in(&tenants, 3);
    let totals = session_totals(&tenant);
    let sql = format!(
        "INSERT INTO stream_events (tenant_id, xid, kind, user_id, data)
         SELECT s.tenant_id, s.last_xid, 'usage', s.user_id,
             jsonb_build_object('session_id', s.session_id) || u.totals
         FROM unnest($1::uuid[], $2::text[]) AS x(t, id)
         JOIN stream_sessions s ON s.tenant_id = x.t AND s.session_id = x.id
         CROSS JOIN LATERAL ({totals}) u
         WHERE s.tenant_id {tenant}
         ORDER BY s.tenant_id, s.session_id"
    );
    let q = sqlx::query(&sql).bind(&ids).bind(&sids);
    let done = bind_tenants(q, &tenants).execute(&mut **tx).await?;
    Ok(done.rows_affected())
}

/// `online: true` for each device row (device and user) the stream last said offline, or never spoke
/// of; one statement for all the group's tenants, rows in (tenant, device, user) order.
async fn device_online(
    tx: &mut Transaction<'_, Postgres>,
    devices: &[(Uuid, &str, &str)],
    xid: i64,
) -> Result<u64, sqlx::Error> {
    let mut devices = devices.to_vec();
    devices.sort_unstable();
    devices.dedup();
    let ids: Vec<Uuid> = devices.iter().map(|d| d.0).collect();
    let dids: Vec<&str> = devices.iter().map(|d| d.1).collect();
    let uids: Vec<&str> = devices.iter().map(|d| d.2).collect();
    let mut tenants = ids.clone();
    tenants.dedup();
    let tenant = tenant_in(&tenants, 5);
    let sql = format!(
        "WITH up AS (
             INSERT INTO stream_devices AS d (tenant_id, device_id, user_id, online, last_xid)
             SELECT v.tenant_id, v.device_id, v.user_id, true, $3
             FROM unnest($1::uuid[], $2::text[], $4::text[]) AS x(t, id, u)
             JOIN devices v ON v.tenant_id = x.t AND v.device_id = x.id AND v.user_id = x.u
             WHERE v.tenant_id {tenant}
             ORDER BY v.tenant_id, v.device_id, v.user_id
             ON CONFLICT (tenant_id, device_id, user_id) DO UPDATE
                 SET online = true, last_xid = GREATEST(d.last_xid, EXCLUDED.last_xid)
                 WHERE NOT d.online
             RETURNING tenant_id, device_id, user_id, last_xid)
         INSERT INTO stream_events (tenant_id, xid, kind, user_id, data)
         SELECT up.tenant_id, up.last_xid, 'device', up.user_id, jsonb_build_object('device_id',
             up.device_id, 'online', true, 'last_heard_at', GREATEST(v.last_seen_at, v.last_heartbeat_at))
         FROM up JOIN devices v ON v.tenant_id = up.tenant_id AND v.device_id = up.device_id
             AND v.user_id = up.user_id
         WHERE v.tenant_id {tenant}"
    );
    let q = sqlx::query(&sql)
        .bind(&ids)
        .bind(&dids)
        .bind(xid)
        .bind(&uids);
    let done = bind_tenants(q, &tenants).execute(&mut **tx).await?;
    Ok(done.rows_affected())
}

/// This transaction's id (assigned now if it has none yet), read on its own so that on Citus it is the
/// coordinator's.
async fn own_xid(tx: &mut Transaction<'_, Postgres>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_current_xact_id()::text::bigint")
        .fetch_one(&mut **tx)
        .await
}

/// Rows an upkeep pass handles at most (per tenant, and tenants per pass).
const UPKEEP_LIMIT: i64 = 1000;

async fn notify<'e, E: sqlx::PgExecutor<'e>>(e: E) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(CHANNEL)
        .execute(e)
        .await?;
    Ok(())
}

/// Writes the usage totals of sessions whose coalesced usage is due. One transaction per tenant (see
/// the module notes).
pub async fn flush_usage(pool: &PgPool) -> Result<(), sqlx::Error> {
    let tenants: Vec<Uuid> = sqlx::query_scalar(
        "SELECT DISTINCT tenant_id FROM stream_sessions WHERE usage_due_at <= now()
         ORDER BY tenant_id LIMIT $1",
    )
    .bind(UPKEEP_LIMIT)
    .fetch_all(pool)
    .await?;
    for tenant in tenants {
        flush_tenant_usage(pool, tenant).await?;
    }
    Ok(())
}

async fn flush_tenant_usage(pool: &PgPool, tenant: Uuid) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    let xid = own_xid(&mut tx).await?;
    // The due sessions, marked sent at their new positions; then their totals, as a batch writes
    // them ([`write_usage`]). Two statements: Citus does not plan the LATERAL totals over the rows of
    // a data-modifying CTE.
    let due: Vec<String> = sqlx::query_scalar(
        "WITH due AS (
             SELECT tenant_id, session_id FROM stream_sessions
             WHERE tenant_id = $1 AND usage_due_at <= now() ORDER BY session_id LIMIT $3
             FOR UPDATE SKIP LOCKED)
         UPDATE stream_sessions s SET usage_due_at = NULL, usage_sent_at = now(),
             last_xid = GREATEST(s.last_xid, $2)
         FROM due WHERE s.tenant_id = $1 AND s.session_id = due.session_id
         RETURNING s.session_id",
    )
    .bind(tenant)
    .bind(xid)
    .bind(UPKEEP_LIMIT)
    .fetch_all(&mut *tx)
    .await?;
    let due: Vec<(Uuid, &str)> = due.iter().map(|s| (tenant, s.as_str())).collect();
    let done = write_usage(&mut tx, &due).await?;
    if done > 0 {
        notify(&mut *tx).await?;
    }
    tx.commit().await
}

/// Streams `online: false` for the devices silent longer than `offline_after_secs`. One transaction per
/// tenant (see the module notes).
pub async fn sweep_devices(pool: &PgPool, offline_after_secs: i64) -> Result<(), sqlx::Error> {
    let tenants: Vec<Uuid> = sqlx::query_scalar(
        "SELECT DISTINCT sd.tenant_id FROM stream_devices sd
         JOIN devices d ON d.tenant_id = sd.tenant_id AND d.device_id = sd.device_id
             AND d.user_id = sd.user_id
         WHERE sd.online
           AND GREATEST(d.last_seen_at, d.last_heartbeat_at) < now() - make_interval(secs => $1)
         ORDER BY 1 LIMIT $2",
    )
    .bind(offline_after_secs as f64)
    .bind(UPKEEP_LIMIT)
    .fetch_all(pool)
    .await?;
    for tenant in tenants {
        sweep_tenant_devices(pool, tenant, offline_after_secs).await?;
    }
    Ok(())
}

async fn sweep_tenant_devices(
    pool: &PgPool,
    tenant: Uuid,
    offline_after_secs: i64,
) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    let xid = own_xid(&mut tx).await?;
    let done = sqlx::query(
        "WITH gone AS (
             SELECT sd.tenant_id, sd.device_id, sd.user_id FROM stream_devices sd
             JOIN devices d ON d.tenant_id = sd.tenant_id AND d.device_id = sd.device_id
                 AND d.user_id = sd.user_id
             WHERE sd.tenant_id = $1 AND d.tenant_id = $1 AND sd.online
               AND GREATEST(d.last_seen_at, d.last_heartbeat_at) < now() - make_interval(secs => $2)
             ORDER BY sd.device_id, sd.user_id LIMIT $4
             FOR UPDATE OF sd SKIP LOCKED),
         up AS (
             UPDATE stream_devices s SET online = false, last_xid = GREATEST(s.last_xid, $3)
             FROM gone WHERE s.tenant_id = $1 AND s.device_id = gone.device_id
                 AND s.user_id = gone.user_id
             RETURNING s.tenant_id, s.device_id, s.user_id, s.last_xid)
         INSERT INTO stream_events (tenant_id, xid, kind, user_id, data)
         SELECT up.tenant_id, up.last_xid, 'device', up.user_id, jsonb_build_object('device_id',
             up.device_id, 'online', false, 'last_heard_at', GREATEST(v.last_seen_at, v.last_heartbeat_at))
         FROM up JOIN devices v ON v.tenant_id = up.tenant_id AND v.device_id = up.device_id
             AND v.user_id = up.user_id
         WHERE v.tenant_id = $1
         ORDER BY up.device_id, up.user_id",
    )
    .bind(tenant)
    .bind(offline_after_secs as f64)
    .bind(xid)
    .bind(UPKEEP_LIMIT)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() > 0 {
        notify(&mut *tx).await?;
    }
    tx.commit().await
}

/// Deletes stream rows older than `cutoff` (recording each tenant's greatest pruned position, so an
/// older resume is told to reload), and sessions' stream state untouched since then.
pub async fn prune(pool: &PgPool, cutoff: DateTime<Utc>) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "WITH gone AS (DELETE FROM stream_events WHERE at < $1 RETURNING tenant_id, xid, id),
         top AS (SELECT DISTINCT ON (tenant_id) tenant_id, xid, id FROM gone
                 ORDER BY tenant_id, xid DESC, id DESC)
         INSERT INTO stream_horizon AS h (tenant_id, xid, id) SELECT tenant_id, xid, id FROM top
         ON CONFLICT (tenant_id) DO UPDATE SET xid = EXCLUDED.xid, id = EXCLUDED.id
             WHERE (EXCLUDED.xid, EXCLUDED.id) > (h.xid, h.id)",
    )
    .bind(cutoff)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM stream_sessions WHERE touched_at < $1 AND usage_due_at IS NULL")
        .bind(cutoff)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}
