//! Usage rollups: what one event adds, the 15-minute rollup key, and the sorted upsert.
//!
//! ## What an event adds ([`Usage::of`])
//! The shared rule, [`apiary_schema::usage::contribution_of`] (the agent's local usage applies the same
//! one): tokens, cost in integer nano-dollars, `unpriced_turns`, completed tool calls, errors and their
//! summed `tool_duration_ms`, `events`. The rollups keep neither `tool_calls_started` nor credits.
//!
//! ## Cost provenance ([`Usage::with_estimate`])
//! The shared rule gives a turn's cost *as sent* and whether it counts as reported (its
//! `unpriced_turns`). The batch writer adds the catalog's estimate (`apiary_schema::prices`, tenant
//! entries first) and this module splits the cost three ways, per turn:
//! - `cost_reported_nanos`: the cost as sent (what the agent's local usage shows as `cost_nanos`);
//! - `cost_estimated_nanos`: the estimate, when a price matches (whether or not a cost was reported);
//! - `cost_nanos`: the cost shown — the reported cost of a turn that has one, else its estimate (a turn
//!   with neither keeps its cost as sent, 0 unless an `unreported` turn carried one);
//! - `estimated_turns`: turns without a reported cost that were estimated; `unpriced_turns`: turns with
//!   neither. So `llm_calls` = reported + `estimated_turns` + `unpriced_turns` turns.
//!
//! ## Active time (`active_ms`)
//! Not from an event: the milliseconds a session spent in status `active` by its stored status history,
//! per bucket, under the session's identity and model `''` (see `store::active`). A batch that changes a
//! session's history adds the new stretches and subtracts the old ones, so a row can take a negative
//! delta; it never holds a negative sum.
//!
//! ## Sums cannot wrap
//! One event's values are bounded (tokens ≤ 10^12, cost ≤ 10^6 USD = 10^15 nano-dollars), their sums are
//! not: 9,224 turns at the cost bound already exceed a bigint. So [`Usage`] holds `i128`: each of its sums
//! adds fewer than 2^64 terms below 2^63, so it cannot overflow. A stored rollup row is a bigint per
//! column; the write keeps every row within it by rejecting, per event, what would not fit
//! (`store::headroom`), and the reads sum with a fallback to exact numeric sums (`query::sums`).
//!
//! ## Grain and key
//! `(tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime)`, `bucket` = `effective_at`
//! floored to 15 minutes (see the migration for why 15 minutes makes day buckets exact in every zone).
//! The same rows summed per UTC hour go to `usage_rollups_hourly`, which answers the whole hours of a
//! query (see `query::usage`); it is written from the same pre-aggregated map, so an hourly row is always
//! the sum of its quarter rows. And summed per UTC hour without colony and session (key
//! `(tenant_id, bucket, user_id, device_id, model, runtime)`, [`narrow_of`]) to `usage_rollups_narrow`,
//! which answers the whole hours of tenant-wide queries grouped by nothing, user, device, model or
//! runtime: a tenant's month there is hours × users' devices × models rows, however many sessions it ran. The narrow rows summed per
//! UTC day ([`daily_of`]) and per UTC month ([`monthly_of`]) go to `usage_rollups_daily` and
//! `usage_rollups_monthly`, which answer the whole days and months of those queries (a year is then
//! about 12 rows per user's device and model instead of one per busy hour).
//!
//! ## Exactness under concurrency
//! Only events whose key was newly inserted into `event_keys` in the same transaction reach [`upsert`], so a
//! duplicate can never be counted. The batch is pre-aggregated per key in a `BTreeMap` and upserted in that
//! (sorted) order; every transaction locks rollup rows in the same global order, so concurrent batches
//! touching the same rows wait for each other instead of deadlocking. Every transaction writes the
//! quarter table first, the hourly table second and the narrow, daily and monthly ones third (one
//! statement, the same for every transaction, so their order is the same too), so that order is global
//! too.

use std::collections::{BTreeMap, HashSet};
use std::sync::LazyLock;

use chrono::{DateTime, Datelike, DurationRound, TimeDelta, TimeZone, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

pub use apiary_schema::usage::{CostBasis, Usage, COLUMNS};

/// The catalog's estimate of one stored event's usage (`usage` as [`Usage::of`] gives it): for an LLM
/// turn with a model, the price `tenant` entries or else the shipped catalog hold for `model` at `at`,
/// applied to its tokens (cache creation priced as 5-minute writes: producers do not say which);
/// None otherwise.
pub fn estimate_of(
    tenant: &[apiary_schema::prices::PriceEntry],
    model: &str,
    at: DateTime<Utc>,
    usage: &Usage,
) -> Option<i64> {
    if usage.llm_calls != 1 || model.is_empty() {
        return None;
    }
    // One event's tokens are at most 10^12 (refused above), so they fit u64.
    let n = |v: i128| u64::try_from(v).unwrap_or(u64::MAX);
    let tokens = apiary_schema::prices::TurnTokens {
        input: n(usage.input_tokens),
        output: n(usage.output_tokens),
        cache_read: n(usage.cached_tokens),
        cache_write_5m: n(usage.cache_creation_tokens),
        cache_write_1h: 0,
    };
    apiary_schema::prices::estimate(tenant, apiary_schema::prices::shipped(), model, at, &tokens)
}

/// The 15-minute bucket an instant falls in.
pub fn bucket_of(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::minutes(15)).expect("in range")
}

/// The UTC hour an instant falls in (the bucket of `usage_rollups_hourly`).
pub fn hour_of(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::hours(1)).expect("in range")
}

/// The UTC day an instant falls in (the bucket of `usage_rollups_daily`).
pub fn day_of(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::days(1)).expect("in range")
}

/// The UTC month an instant falls in (the bucket of `usage_rollups_monthly`).
pub fn month_of(t: DateTime<Utc>) -> DateTime<Utc> {
    let d = t.date_naive();
    Utc.from_utc_datetime(
        &chrono::NaiveDate::from_ymd_opt(d.year(), d.month(), 1)
            .expect("the first of a month exists")
            .and_time(chrono::NaiveTime::MIN),
    )
}

/// A rollup row's key (within a tenant). Empty strings stand for "none".
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RollupKey {
    pub bucket: DateTime<Utc>,
    pub user_id: String,
    pub device_id: String,
    pub colony_id: String,
    pub session_id: String,
    pub model: String,
    /// The event's runtime (`hive`, `claude_code`, `otel`, ...).
    pub runtime: String,
}

/// The `usage_rollups_hourly` row a 15-minute row adds to.
pub fn hourly_of(k: &RollupKey) -> RollupKey {
    RollupKey {
        bucket: hour_of(k.bucket),
        ..k.clone()
    }
}

/// The `usage_rollups_narrow` row a 15-minute (or hourly) row adds to: its hour, user, device, model
/// and runtime, with colony and session empty. Sorted like the table's key, since the empty columns
/// compare equal.
pub fn narrow_of(k: &RollupKey) -> RollupKey {
    RollupKey {
        bucket: hour_of(k.bucket),
        user_id: k.user_id.clone(),
        device_id: k.device_id.clone(),
        colony_id: String::new(),
        session_id: String::new(),
        model: k.model.clone(),
        runtime: k.runtime.clone(),
    }
}

/// The `usage_rollups_daily` row a row adds to: [`narrow_of`] at its UTC day.
pub fn daily_of(k: &RollupKey) -> RollupKey {
    RollupKey {
        bucket: day_of(k.bucket),
        ..narrow_of(k)
    }
}

/// The `usage_rollups_monthly` row a row adds to: [`narrow_of`] at its UTC month.
pub fn monthly_of(k: &RollupKey) -> RollupKey {
    RollupKey {
        bucket: month_of(k.bucket),
        ..narrow_of(k)
    }
}

/// The tenant's month for a row's runtime, every user, model and tool together (only the key is empty
/// but for the month and the runtime): no table holds it, but it bounds every row of
/// `tool_rollups_tenant_hourly`, `_daily` and `_monthly` (`crate::tool_rollups`), so the batch writer
/// keeps it within a bigint (`store::headroom`).
pub fn tenant_monthly_of(k: &RollupKey) -> RollupKey {
    RollupKey {
        bucket: month_of(k.bucket),
        user_id: String::new(),
        device_id: String::new(),
        model: String::new(),
        ..narrow_of(k)
    }
}

/// Usage already stored under one colony row that moves to another because its session became a forked
/// colony run or stopped being one (`store::colonies`): `key` (its UTC day, colony id, session, model
/// and runtime; no user or device) is taken out of the row with `fork_session_id` = `stored_fork` and
/// added where the session's state now puts it.
#[derive(Debug, Clone, PartialEq)]
pub struct ColonyMove {
    pub key: RollupKey,
    pub stored_fork: String,
    pub usage: Usage,
}

/// The tenant's month for a row's model and runtime, every user and colony together: no table holds it
/// as such, but it bounds every row of `usage_rollups_colony_daily` and `_monthly` (whose rows sum
/// users), so the batch writer keeps it within a bigint (`store::headroom`).
pub fn tenant_model_monthly_of(k: &RollupKey) -> RollupKey {
    RollupKey {
        user_id: String::new(),
        device_id: String::new(),
        ..monthly_of(k)
    }
}

/// Sums `rows` into the rows `to` names.
fn regroup(
    rows: &BTreeMap<RollupKey, Usage>,
    to: fn(&RollupKey) -> RollupKey,
) -> BTreeMap<RollupKey, Usage> {
    let mut out: BTreeMap<RollupKey, Usage> = BTreeMap::new();
    for (k, u) in rows {
        out.entry(to(k)).or_default().add(u);
    }
    out
}

/// Adds the pre-aggregated 15-minute rows to `usage_rollups`, then their hourly sums to
/// `usage_rollups_hourly`, then their narrow hourly, daily and monthly sums to `usage_rollups_narrow`,
/// `usage_rollups_daily` and `usage_rollups_monthly` (one statement), each in key order (see the module
/// notes).
pub async fn upsert(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    rows: &BTreeMap<RollupKey, Usage>,
) -> Result<(), sqlx::Error> {
    let colony = upsert_many(tx, &[(tenant_id, rows, &[])]).await?;
    if !colony.is_empty() {
        bind_colony_rows(sqlx::query(UPSERT_COLONY_SQL.as_str()), &colony)?
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// One tenant's rows for [`upsert_many`]: its id, its 15-minute rows, and the colony usage its batch
/// moves ([`ColonyMove`]).
pub type TenantRows<'a> = (Uuid, &'a BTreeMap<RollupKey, Usage>, &'a [ColonyMove]);

/// [`upsert`] for several tenants' rows (a group's, [`crate::store::batch`]) in one statement per
/// table, rows in (tenant, key) order, `tenants` sorted by id and distinct — all but the colony rows,
/// which it returns to be written last (one read per tenant of its forked sessions decides them): they
/// sum every user of a tenant, so concurrent transactions of one tenant meet on them, and a row lock
/// taken last is held only until the commit ([`crate::store::tenant_wide`]).
pub async fn upsert_many(
    tx: &mut Transaction<'_, Postgres>,
    tenants: &[TenantRows<'_>],
) -> Result<ColonyRows, sqlx::Error> {
    if tenants
        .iter()
        .all(|(_, rows, moves)| rows.is_empty() && moves.is_empty())
    {
        return Ok(ColonyRows::default());
    }
    let regroup_all = |to: fn(&RollupKey) -> RollupKey| -> Vec<_> {
        tenants
            .iter()
            .map(|(t, rows, _)| (*t, regroup(rows, to)))
            .collect()
    };
    let hourly = regroup_all(hourly_of);
    let (narrow, daily, monthly) = (
        regroup_all(narrow_of),
        regroup_all(daily_of),
        regroup_all(monthly_of),
    );
    let quarter = tenants.iter().map(|(t, rows, _)| (*t, *rows));
    if tenants.iter().any(|(_, rows, _)| !rows.is_empty()) {
        let q = sqlx::query(UPSERT_QUARTER_SQL.as_str());
        bind_rows(q, quarter, Key::Wide)?.execute(&mut **tx).await?;
        let q = sqlx::query(UPSERT_HOURLY_SQL.as_str());
        bind_rows(q, hourly.iter().map(|(t, r)| (*t, r)), Key::Wide)?
            .execute(&mut **tx)
            .await?;
    }
    // Narrow, daily and monthly rows in one statement (see UPSERT_CALENDAR_SQL): bound in that order.
    let mut q = sqlx::query(UPSERT_CALENDAR_SQL.as_str());
    for rows in [&narrow, &daily, &monthly] {
        q = bind_rows(q, rows.iter().map(|(t, r)| (*t, r)), Key::Narrow)?;
    }
    q.execute(&mut **tx).await?;
    // The colony rows from the hourly ones (the statement sums them per day), each under its session
    // when that is a forked run, and the moves: in where the session's state puts it now, out of where
    // it was stored.
    let mut forked: Vec<HashSet<String>> = Vec::with_capacity(hourly.len());
    for (t, rows) in &hourly {
        forked.push(forked_sessions(tx, *t, rows).await?);
    }
    let taken_out: Vec<Vec<Usage>> = tenants
        .iter()
        .map(|(_, _, moves)| {
            moves
                .iter()
                .map(|m| Usage::from_columns(m.usage.columns().map(|c| -c)))
                .collect()
        })
        .collect();
    let mut inputs = ColonyRows::default();
    for ((((t, rows), (_, _, moves)), out), forked) in
        hourly.into_iter().zip(tenants).zip(taken_out).zip(&forked)
    {
        inputs.0.extend(rows.into_iter().map(|(k, u)| {
            let fork = match forked.contains(&k.session_id) {
                true => k.session_id.clone(),
                false => String::new(),
            };
            (t, k, fork, u)
        }));
        for (m, out) in moves.iter().zip(out) {
            let now = match m.stored_fork.is_empty() {
                true => m.key.session_id.clone(),
                false => String::new(),
            };
            inputs.0.push((t, m.key.clone(), now, m.usage));
            inputs
                .0
                .push((t, m.key.clone(), m.stored_fork.clone(), out));
        }
    }
    Ok(inputs)
}

/// The input rows of the colony upserts ([`upsert_many`]' answer): tenant, key (an hourly one or a
/// move's day), its `fork_session_id`, sums.
#[derive(Debug, Default)]
pub struct ColonyRows(Vec<(Uuid, RollupKey, String, Usage)>);

impl ColonyRows {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The sessions of `rows` that are forked colony runs (runs with a parent) as this transaction sees
/// `colony_runs` (after the batch's own runs): one statement per tenant with rows of a session, which
/// on Citus goes to the tenant's shard alone.
async fn forked_sessions(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    rows: &BTreeMap<RollupKey, Usage>,
) -> Result<HashSet<String>, sqlx::Error> {
    let mut sessions: Vec<&str> = rows
        .keys()
        .map(|k| k.session_id.as_str())
        .filter(|s| !s.is_empty())
        .collect();
    sessions.sort_unstable();
    sessions.dedup();
    if sessions.is_empty() {
        return Ok(HashSet::new());
    }
    let forked: Vec<String> = sqlx::query_scalar(
        "SELECT session_id FROM colony_runs WHERE tenant_id = $1 AND session_id = ANY($2)
         AND parent_session_id IS NOT NULL",
    )
    .bind(tenant_id)
    .bind(&sessions)
    .fetch_all(&mut **tx)
    .await?;
    Ok(forked.into_iter().collect())
}

/// Binds the colony upserts' input rows as the arrays of their `unnest` ([`colony_sql`]' order,
/// [`COLONY_PARAMS`] of them).
pub fn bind_colony_rows<'q>(q: Query<'q>, rows: &'q ColonyRows) -> Result<Query<'q>, sqlx::Error> {
    let rows = &rows.0;
    let too_big = || sqlx::Error::Encode("a rollup sum exceeds the bigint range".into());
    let mut ids = Vec::with_capacity(rows.len());
    let mut buckets = Vec::with_capacity(rows.len());
    let mut forks = Vec::with_capacity(rows.len());
    let mut dims: [Vec<&str>; 4] = Default::default();
    let mut nums: [Vec<i64>; COLUMNS] = Default::default();
    for (t, k, fork, u) in rows {
        ids.push(*t);
        buckets.push(k.bucket);
        forks.push(fork.as_str());
        for (col, v) in dims
            .iter_mut()
            .zip([&k.colony_id, &k.session_id, &k.model, &k.runtime])
        {
            col.push(v.as_str());
        }
        for (col, v) in nums.iter_mut().zip(u.columns()) {
            col.push(i64::try_from(v).map_err(|_| too_big())?);
        }
    }
    let [colonies, sessions, models, runtimes] = dims;
    let mut q = q
        .bind(ids)
        .bind(buckets)
        .bind(colonies)
        .bind(sessions)
        .bind(forks)
        .bind(models)
        .bind(runtimes);
    for col in nums {
        q = q.bind(col);
    }
    Ok(q)
}

/// The key of a rollup table: the wide one (15-minute and hourly tables), or the narrow one (narrow
/// hourly, daily and monthly tables: no colony or session).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Wide,
    Narrow,
}

pub type Query<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

/// Binds `tenants`' rows to `q` as the arrays of one `unnest` ([`upsert_sql`]'s order).
fn bind_rows<'q>(
    q: Query<'q>,
    tenants: impl Iterator<Item = (Uuid, &'q BTreeMap<RollupKey, Usage>)>,
    key: Key,
) -> Result<Query<'q>, sqlx::Error> {
    let mut ids = Vec::new();
    let mut buckets = Vec::new();
    let mut dims: [Vec<&str>; 6] = Default::default();
    let mut nums: [Vec<i64>; COLUMNS] = Default::default();
    // `store::headroom` admitted only what fits; a sum that does not is refused here, never wrapped.
    let too_big = || sqlx::Error::Encode("a rollup sum exceeds the bigint range".into());
    for (tenant_id, rows) in tenants {
        for (k, u) in rows {
            ids.push(tenant_id);
            buckets.push(k.bucket);
            for (col, v) in dims.iter_mut().zip([
                &k.user_id,
                &k.device_id,
                &k.colony_id,
                &k.session_id,
                &k.model,
                &k.runtime,
            ]) {
                col.push(v.as_str());
            }
            for (col, v) in nums.iter_mut().zip(u.columns()) {
                col.push(i64::try_from(v).map_err(|_| too_big())?);
            }
        }
    }
    let [users, devices, colonies, sessions, models, runtimes] = dims;
    let dims = match key {
        Key::Narrow => vec![users, devices, models, runtimes],
        Key::Wide => vec![users, devices, colonies, sessions, models, runtimes],
    };
    let mut q = q.bind(ids).bind(buckets);
    for col in dims {
        q = q.bind(col);
    }
    for col in nums {
        q = q.bind(col);
    }
    Ok(q)
}

/// The rollup columns holding sums, in [`Usage::columns`] order (the order [`bind_rows`] binds them).
pub const SUM_COLUMNS: [&str; COLUMNS] = [
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_creation_tokens",
    "cost_nanos",
    "llm_calls",
    "unpriced_turns",
    "tool_calls",
    "tool_errors",
    "events",
    "tool_duration_ms",
    "active_ms",
    "cost_reported_nanos",
    "cost_estimated_nanos",
    "estimated_turns",
];

/// The key columns after tenant and bucket, as [`bind_rows`] binds them for each [`Key`].
fn key_columns(key: Key) -> &'static [&'static str] {
    match key {
        Key::Wide => &[
            "user_id",
            "device_id",
            "colony_id",
            "session_id",
            "model",
            "runtime",
        ],
        Key::Narrow => &["user_id", "device_id", "model", "runtime"],
    }
}

/// The rollup upsert into `table` with `key`'s columns, its arrays bound from parameter `$first` on in
/// [`bind_rows`]' order: rows come in the (sorted) array order; `unnest` preserves it.
fn upsert_sql(table: &str, key: Key, first: usize) -> String {
    let keys = key_columns(key);
    let types = ["uuid", "timestamptz"]
        .into_iter()
        .chain(keys.iter().map(|_| "text"))
        .chain(SUM_COLUMNS.iter().map(|_| "int8"));
    let arrays: Vec<String> = types
        .enumerate()
        .map(|(i, ty)| format!("${}::{ty}[]", first + i))
        .collect();
    let keys = keys.join(", ");
    let sets: Vec<String> = SUM_COLUMNS
        .iter()
        .map(|c| format!("{c} = r.{c} + EXCLUDED.{c}"))
        .collect();
    format!(
        "INSERT INTO {table} AS r (tenant_id, bucket, {keys}, {sums}) SELECT u.* FROM unnest({arrays}) AS u \
         ON CONFLICT (tenant_id, bucket, {keys}) DO UPDATE SET {sets}",
        sums = SUM_COLUMNS.join(", "),
        arrays = arrays.join(", "),
        sets = sets.join(", "),
    )
}

/// The parameters one [`upsert_sql`] binds: tenant, bucket, the narrow key, the sums.
const NARROW_PARAMS: usize = 2 + 4 + COLUMNS;

static UPSERT_QUARTER_SQL: LazyLock<String> =
    LazyLock::new(|| upsert_sql("usage_rollups", Key::Wide, 1));
static UPSERT_HOURLY_SQL: LazyLock<String> =
    LazyLock::new(|| upsert_sql("usage_rollups_hourly", Key::Wide, 1));
/// The colony tables' key columns after tenant and bucket.
const COLONY_KEYS: &str = "colony_id, fork_session_id, model, runtime";

/// The parameters of the colony upserts ([`bind_colony_rows`]): tenant, hour, colony, session, fork,
/// model, runtime and the sums.
pub const COLONY_PARAMS: usize = 7 + COLUMNS;

/// The colony daily and monthly upserts, their input arrays bound from `$first` on
/// ([`bind_colony_rows`]' order; both read the same arrays). Each input row is an hour of one session's usage (or a move of a
/// day's, [`ColonyMove`]) with its `fork_session_id` ([`forked_sessions`]: read before, not by a
/// subquery here, which Citus does not plan next to `unnest`), summed into its UTC day. The rows are
/// summed per key and written in key order, the days before the months.
pub fn colony_sql(first: usize) -> [String; 2] {
    let sums: Vec<String> = SUM_COLUMNS
        .iter()
        .map(|c| format!("sum({c})::int8 AS {c}"))
        .collect();
    // tenant, bucket, colony, session, fork, model, runtime, then the sums
    let arrays: Vec<String> = [
        "uuid",
        "timestamptz",
        "text",
        "text",
        "text",
        "text",
        "text",
    ]
    .into_iter()
    .chain(SUM_COLUMNS.iter().map(|_| "int8"))
    .enumerate()
    .map(|(i, ty)| format!("${}::{ty}[]", first + i))
    .collect();
    let sets: Vec<String> = SUM_COLUMNS
        .iter()
        .map(|c| format!("{c} = r.{c} + EXCLUDED.{c}"))
        .collect();
    // Each upsert reads the arrays itself (no shared WITH item: Citus would send its rows to every
    // worker as an intermediate result, making each group a transaction across workers).
    let upsert = |table: &str, bucket: &str| {
        format!(
            "INSERT INTO {table} AS r (tenant_id, bucket, {COLONY_KEYS}, {cols}) \
             SELECT u.tenant_id, {bucket}, u.colony_id, u.fork, u.model, u.runtime, {sums} \
             FROM unnest({arrays}) AS u(tenant_id, bucket, colony_id, session_id, fork, model, runtime, \
             {cols}) GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6 \
             ON CONFLICT (tenant_id, bucket, {COLONY_KEYS}) DO UPDATE SET {sets}",
            cols = SUM_COLUMNS.join(", "),
            sums = sums.join(", "),
            arrays = arrays.join(", "),
            sets = sets.join(", "),
        )
    };
    [
        upsert(
            "usage_rollups_colony_daily",
            "date_bin('1 day', u.bucket, '2000-01-01 00:00:00+00')",
        ),
        upsert(
            "usage_rollups_colony_monthly",
            "date_trunc('month', u.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
        ),
    ]
}

/// The colony daily and monthly rows computed from `usage_rollups_hourly` and `colony_runs` as they
/// stand (two `INSERT … SELECT`s, days then months): what the write path keeps in those tables, for a
/// bench that loads the finer rows directly. (The migration that created the tables backfilled them the
/// same way.)
pub fn colony_rollups_from_hourly() -> [String; 2] {
    let sums = |prefix: &str| -> String {
        SUM_COLUMNS
            .iter()
            .map(|c| format!("sum({prefix}{c})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    [
        format!(
            "INSERT INTO usage_rollups_colony_daily SELECT h.tenant_id, date_bin('1 day', h.bucket, \
             '2000-01-01 00:00:00+00'), h.colony_id, CASE WHEN f.session_id IS NULL THEN '' ELSE h.session_id END, \
             h.model, h.runtime, {} FROM usage_rollups_hourly h LEFT JOIN colony_runs f \
             ON f.tenant_id = h.tenant_id AND f.session_id = h.session_id AND f.parent_session_id IS NOT NULL \
             GROUP BY 1, 2, 3, 4, 5, 6",
            sums("h.")
        ),
        format!(
            "INSERT INTO usage_rollups_colony_monthly SELECT tenant_id, date_trunc('month', bucket AT TIME ZONE \
             'UTC') AT TIME ZONE 'UTC', {COLONY_KEYS}, {} FROM usage_rollups_colony_daily GROUP BY 1, 2, 3, 4, 5, 6",
            sums("")
        ),
    ]
}

/// The narrow hourly, daily and monthly upserts as one statement (their parameters bound in that
/// order): one round trip, and the same statement in every transaction, so the tables' rows are always
/// locked in the same order.
static UPSERT_CALENDAR_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH daily AS ({}), monthly AS ({}) {}",
        upsert_sql("usage_rollups_daily", Key::Narrow, 1 + NARROW_PARAMS),
        upsert_sql("usage_rollups_monthly", Key::Narrow, 1 + 2 * NARROW_PARAMS),
        upsert_sql("usage_rollups_narrow", Key::Narrow, 1),
    )
});

/// The colony upserts alone (days, then months), for [`upsert`]; a group's batches write them with the
/// tenant's tool rows ([`crate::store::tenant_wide`]).
static UPSERT_COLONY_SQL: LazyLock<String> = LazyLock::new(|| {
    let [daily, monthly] = colony_sql(1);
    format!("WITH colony_daily AS ({daily}) {monthly}")
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_sums_every_column_and_columns_round_trip() {
        let a = Usage::from_columns(std::array::from_fn(|i| 1000 + i as i128));
        let b = Usage::from_columns(std::array::from_fn(|i| 7 * (i as i128 + 2)));
        let mut sum = Usage::from_columns(a.columns());
        sum.add(&b);
        let want: Vec<i128> = a
            .columns()
            .iter()
            .zip(b.columns())
            .map(|(x, y)| x + y)
            .collect();
        assert_eq!(sum.columns().to_vec(), want);
        assert_eq!(
            Usage::from_columns(want.clone().try_into().unwrap())
                .columns()
                .to_vec(),
            want
        );
    }

    fn turn(cost_nanos: i128, unpriced: i128) -> Usage {
        Usage {
            cost_nanos,
            cost_reported_nanos: cost_nanos,
            llm_calls: 1,
            unpriced_turns: unpriced,
            events: 1,
            ..Usage::default()
        }
    }

    #[test]
    fn an_estimate_prices_an_unreported_turn_and_sits_beside_a_reported_one() {
        let reported = turn(500, 0).with_estimate(Some(700));
        assert_eq!(
            (
                reported.cost_nanos,
                reported.cost_reported_nanos,
                reported.cost_estimated_nanos
            ),
            (500, 500, 700)
        );
        assert_eq!((reported.unpriced_turns, reported.estimated_turns), (0, 0));
        assert_eq!(reported.cost_basis(), CostBasis::Reported);
        let estimated = turn(0, 1).with_estimate(Some(700));
        assert_eq!(
            (
                estimated.cost_nanos,
                estimated.cost_reported_nanos,
                estimated.cost_estimated_nanos
            ),
            (700, 0, 700)
        );
        assert_eq!(
            (estimated.unpriced_turns, estimated.estimated_turns),
            (0, 1)
        );
        assert_eq!(estimated.cost_basis(), CostBasis::Estimated);
        let neither = turn(0, 1).with_estimate(None);
        assert_eq!(neither, turn(0, 1));
        assert_eq!(neither.cost_basis(), CostBasis::None);
        let mut mixed = reported;
        mixed.add(&estimated);
        mixed.add(&neither);
        assert_eq!(mixed.cost_basis(), CostBasis::Mixed);
        assert_eq!((mixed.cost_nanos, mixed.llm_calls), (1200, 3));
        // Not a turn: an estimate changes nothing.
        let tool = Usage {
            tool_calls: 1,
            events: 1,
            ..Usage::default()
        };
        assert_eq!(tool.with_estimate(Some(5)), tool);
        assert_eq!(tool.cost_basis(), CostBasis::None);
    }

    #[test]
    fn the_calendar_statement_numbers_each_tables_parameters_after_the_last() {
        let sql = UPSERT_CALENDAR_SQL.as_str();
        let daily = &sql[sql.find("usage_rollups_daily").unwrap()..];
        assert!(daily.contains("unnest($22::uuid[], $23::timestamptz[], $24::text[], $25::text[], $26::text[], $27::text[], $28::int8[]"), "{sql}");
        assert!(
            daily.contains("ON CONFLICT (tenant_id, bucket, user_id, device_id, model, runtime)"),
            "{sql}"
        );
        assert!(sql.contains("$63::int8[]) AS u"), "{sql}");
        assert!(!sql.contains("$64") && !sql.contains("colony"), "{sql}");
        // The colony rows' arrays on their own: tenant, hour, colony, session, the given fork, model,
        // runtime, the sums; days and months read the same arrays.
        let colony = UPSERT_COLONY_SQL.as_str();
        for table in ["usage_rollups_colony_daily", "usage_rollups_colony_monthly"] {
            let at = &colony[colony.find(table).unwrap()..];
            assert!(at.contains("unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int8[]"), "{colony}");
            assert!(at.contains("$22::int8[]) AS u(tenant_id"), "{colony}");
        }
        assert_eq!(COLONY_PARAMS, 22);
        assert!(!colony.contains("$23"), "{colony}");
        let wide = UPSERT_QUARTER_SQL.as_str();
        assert!(wide.contains("$8::text[], $9::int8[]"), "{wide}");
        assert!(wide.contains("$23::int8[]) AS u"), "{wide}");
        assert!(
            wide.contains("estimated_turns = r.estimated_turns + EXCLUDED.estimated_turns"),
            "{wide}"
        );
    }

    #[test]
    fn buckets_are_quarter_hours() {
        let t: DateTime<Utc> = "2026-11-03T10:44:59.9Z".parse().unwrap();
        assert_eq!(
            bucket_of(t),
            "2026-11-03T10:30:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        assert_eq!(day_of(t), at("2026-11-03T00:00:00Z"));
        assert_eq!(month_of(t), at("2026-11-01T00:00:00Z"));
        assert_eq!(
            month_of(at("2026-12-31T23:59:59Z")),
            at("2026-12-01T00:00:00Z")
        );
        assert_eq!(
            month_of(at("2027-01-01T00:00:00Z")),
            at("2027-01-01T00:00:00Z")
        );
    }

    fn sonnet_turn() -> Usage {
        // 5250 uncached + 12000 cache reads + 1000 cache writes inside 18250 input tokens, 412 output.
        Usage {
            input_tokens: 18250,
            output_tokens: 412,
            cached_tokens: 12000,
            cache_creation_tokens: 1000,
            llm_calls: 1,
            unpriced_turns: 1,
            events: 1,
            ..Usage::default()
        }
    }

    #[test]
    fn a_turn_is_priced_by_the_tenants_entry_else_the_catalog_and_anything_else_is_not_priced() {
        let at: DateTime<Utc> = "2026-11-03T10:00:00Z".parse().unwrap();
        let model = "claude-sonnet-4-5-20250929";
        // The shipped Sonnet 4.5 rates (USD per million): 3 input, 0.30 cache read, 3.75 for a cache
        // write (priced as a 5-minute one), 15 output.
        assert_eq!(
            estimate_of(&[], model, at, &sonnet_turn()),
            Some(5250 * 3000 + 12000 * 300 + 1000 * 3750 + 412 * 15000)
        );
        let tenant = apiary_schema::prices::parse_catalog(
            r#"
            [[price]]
            id = "tenant/sonnet"
            models = ["claude-sonnet-4-5*"]
            from = "2026-01-01"
            input = "1.00"
            output = "2.00"
            "#,
        )
        .unwrap()
        .remove(0);
        // Without cache rates the tenant's entry prices cache reads and writes as input.
        assert_eq!(
            estimate_of(&[tenant], model, at, &sonnet_turn()),
            Some(18250 * 1000 + 412 * 2000)
        );
        // A tool call with the same tokens and model is not a turn; a turn without a model has no price.
        let not_a_turn = Usage {
            llm_calls: 0,
            unpriced_turns: 0,
            tool_calls: 1,
            ..sonnet_turn()
        };
        assert_eq!(estimate_of(&[], model, at, &not_a_turn), None);
        assert_eq!(estimate_of(&[], "", at, &sonnet_turn()), None);
        // Before the catalog's first Sonnet 4.5 price, nothing prices it.
        let before: DateTime<Utc> = "2025-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(estimate_of(&[], model, before, &sonnet_turn()), None);
    }

    fn key(bucket: &str, session: &str, model: &str) -> RollupKey {
        RollupKey {
            bucket: bucket.parse().unwrap(),
            user_id: "u1".into(),
            device_id: "d1".into(),
            colony_id: "c1".into(),
            session_id: session.into(),
            model: model.into(),
            runtime: "hive".into(),
        }
    }

    #[test]
    fn coarser_rows_keep_the_user_device_model_and_runtime_at_their_utc_hour_day_and_month() {
        let k = key("2026-11-03T10:45:00Z", "s1", "m");
        let narrow = |bucket: &str| RollupKey {
            bucket: bucket.parse().unwrap(),
            colony_id: String::new(),
            session_id: String::new(),
            ..k.clone()
        };
        assert_eq!(hourly_of(&k), key("2026-11-03T10:00:00Z", "s1", "m"));
        assert_eq!(narrow_of(&k), narrow("2026-11-03T10:00:00Z"));
        assert_eq!(daily_of(&k), narrow("2026-11-03T00:00:00Z"));
        assert_eq!(monthly_of(&k), narrow("2026-11-01T00:00:00Z"));
        assert_eq!(narrow_of(&k).device_id, "d1");
        // The rows that bound every user's sums keep neither the user nor the device.
        for tenant_wide in [tenant_monthly_of(&k), tenant_model_monthly_of(&k)] {
            assert_eq!(
                (tenant_wide.user_id.as_str(), tenant_wide.device_id.as_str()),
                ("", "")
            );
        }
    }

    #[test]
    fn regrouping_sums_the_rows_that_share_a_coarser_key_and_keeps_the_others_apart() {
        let cost = |n: i128, events: i128| Usage {
            cost_nanos: n,
            events,
            ..Usage::default()
        };
        let rows = BTreeMap::from([
            (key("2026-11-03T10:00:00Z", "s1", "m"), cost(1, 1)),
            (key("2026-11-03T10:15:00Z", "s2", "m"), cost(10, 1)),
            (key("2026-11-03T10:30:00Z", "s1", "n"), cost(100, 1)),
            (key("2026-11-03T10:45:00Z", "s1", "m"), cost(1000, 1)),
            (key("2026-11-03T11:00:00Z", "s1", "m"), cost(10000, 1)),
            (
                RollupKey {
                    device_id: "d2".into(),
                    ..key("2026-11-03T10:30:00Z", "s3", "m")
                },
                cost(100000, 1),
            ),
        ]);
        // Per hour, one session's quarters of one model meet; other sessions and models stay apart.
        assert_eq!(
            regroup(&rows, hourly_of),
            BTreeMap::from([
                (key("2026-11-03T10:00:00Z", "s1", "m"), cost(1001, 2)),
                (key("2026-11-03T10:00:00Z", "s1", "n"), cost(100, 1)),
                (key("2026-11-03T10:00:00Z", "s2", "m"), cost(10, 1)),
                (
                    RollupKey {
                        device_id: "d2".into(),
                        ..key("2026-11-03T10:00:00Z", "s3", "m")
                    },
                    cost(100000, 1)
                ),
                (key("2026-11-03T11:00:00Z", "s1", "m"), cost(10000, 1)),
            ])
        );
        // Narrow, every session of a device and model in an hour meets; another device stays apart.
        assert_eq!(
            regroup(&rows, narrow_of),
            BTreeMap::from([
                (
                    narrow_of(&key("2026-11-03T10:00:00Z", "", "m")),
                    cost(1011, 3)
                ),
                (
                    narrow_of(&key("2026-11-03T10:00:00Z", "", "n")),
                    cost(100, 1)
                ),
                (
                    narrow_of(&RollupKey {
                        device_id: "d2".into(),
                        ..key("2026-11-03T10:00:00Z", "", "m")
                    }),
                    cost(100000, 1)
                ),
                (
                    narrow_of(&key("2026-11-03T11:00:00Z", "", "m")),
                    cost(10000, 1)
                ),
            ])
        );
    }
}
