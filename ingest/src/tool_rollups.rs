//! Usage per tool (`tool_rollups`): completed calls, errors, durations and a duration histogram per
//! 15-minute bucket × user × device × colony × session × runtime × tool name, written from the same new
//! events as the usage rollups, in the same transaction, after them (in key order: the deadlock rule).
//! The same rows summed without device, colony and session per UTC hour, day and month go to
//! `tool_rollups_hourly`, `tool_rollups_daily` and `tool_rollups_monthly`, and those summed over users
//! to `tool_rollups_tenant_hourly`, `_daily` and `_monthly`, in the same statement, so that a query
//! grouped by tool (and tenant, user or runtime) reads each unit of a long range at its coarsest grain
//! (`query::usage::split`), as the usage queries do, and one not grouped by user reads a row per tool
//! and runtime rather than one per user.
//!
//! ## The histogram
//! A fixed set of bucket bounds ([`DURATION_BOUNDS_MS`]): slot 0 holds 0 ms, then each slot `[lo, hi)`
//! with bounds about √2 apart (1, 2, 3, 4, 6, 8, 11, 16, … ms, at most 2× at 1 → 2 ms), the last slot
//! everything from 67,108,864 ms (≈ 18.6 h) on. A row's `duration_hist` counts its timed calls per slot,
//! so histograms of any rows merge exactly by element-wise addition (on write, and as per-slot sums on
//! read), and p50/p95 of any group come from its merged counts ([`percentile`]). A row's histogram is
//! written without its trailing zero slots (a slot past its end counts 0; rows written before hold all
//! of them), so it holds the slots up to its longest call's.
//!
//! ## Precision
//! A percentile is the nearest-rank one (the smallest duration with at least p of the calls at or below
//! it). Its slot is exact; within the slot it is interpolated linearly by rank over the whole
//! milliseconds the slot holds (a slot's only call reads as its middle), so the value shown is a whole number of milliseconds in the same slot as
//! the exact one: exact up to 3 ms, otherwise off by less than the slot's width (< 41% of the value,
//! ≤ 2× between 1 and 2 ms); in the last slot it is the slot's lower bound.
//!
//! ## Exactness
//! Only events admitted into the usage rollups reach this table (rejected ones do not, see
//! `store::headroom`), so its calls and errors equal the usage rows' `tool_calls` and `tool_errors` and
//! its durations their `tool_duration_ms`. Its sums cannot overflow: a tool row's sums are bounded by the
//! usage row of the same bucket, session and identity (model ''), which the batch writer keeps within
//! a bigint; a narrow tool row's (hour, day or month) by the narrow, daily or monthly usage row of the
//! same bucket, user and runtime (model ''), which it keeps within a bigint too; a tenant tool row's by
//! the tenant's month of tool calls, errors and durations for its runtime, all users and tools
//! together, which the batch writer keeps within a bigint for this reason alone (`store::headroom`).

use std::collections::BTreeMap;

use apiary_schema::CanonicalEvent;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::rollups::{self, RollupKey};

/// The upper bounds (exclusive) of the histogram slots but the last, in milliseconds: `round(2^(k/2))`
/// for k = 0..=52, without the repeated 1. The migration `20261128000000_tool_durations` backfills with
/// the same list (a test compares them).
pub const DURATION_BOUNDS_MS: [i64; 52] = [
    1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256, 362, 512, 724, 1024, 1448, 2048,
    2896, 4096, 5793, 8192, 11585, 16384, 23170, 32768, 46341, 65536, 92682, 131072, 185364,
    262144, 370728, 524288, 741455, 1048576, 1482910, 2097152, 2965821, 4194304, 5931642, 8388608,
    11863283, 16777216, 23726566, 33554432, 47453133, 67108864,
];

/// Slots of a histogram.
pub const SLOTS: usize = DURATION_BOUNDS_MS.len() + 1;

/// The slot of a duration: how many bounds are at or below it (Postgres' `width_bucket(d, bounds)`).
pub fn slot(ms: i64) -> usize {
    DURATION_BOUNDS_MS.partition_point(|b| *b <= ms)
}

/// The whole milliseconds a slot holds: `[lo, hi]`, inclusive (`hi` = `lo` for the last slot).
fn slot_range(i: usize) -> (i64, i64) {
    let lo = if i == 0 { 0 } else { DURATION_BOUNDS_MS[i - 1] };
    let hi = DURATION_BOUNDS_MS.get(i).map_or(lo, |b| b - 1);
    (lo, hi)
}

/// The p-th percentile (0 < p ≤ 1) of the durations counted in `hist`, in whole milliseconds (see the
/// module notes for its precision): the nearest rank's slot, and within it the rank's place among the
/// slot's calls (each at the middle of its share) over the slot's milliseconds; None without a timed
/// call.
pub fn percentile(hist: &[i128], p: f64) -> Option<i64> {
    let n: i128 = hist.iter().sum();
    if n <= 0 {
        return None;
    }
    let rank = ((p * n as f64).ceil() as i128).clamp(1, n);
    let mut below = 0i128;
    for (i, c) in hist.iter().enumerate() {
        if *c > 0 && below + c >= rank {
            let (lo, hi) = slot_range(i);
            // The rank's place among the slot's calls, each taken at the middle of its share.
            let f = ((rank - below) as f64 - 0.5) / *c as f64;
            return Some(lo + ((hi - lo) as f64 * f).round() as i64);
        }
        below += c;
    }
    None
}

/// A tool row's key (within a tenant): the usage key without the model, with the tool name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ToolKey {
    pub bucket: DateTime<Utc>,
    pub user_id: String,
    pub device_id: String,
    pub colony_id: String,
    pub session_id: String,
    pub runtime: String,
    pub tool_name: String,
}

/// A tool row's sums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSums {
    pub calls: i64,
    pub errors: i64,
    pub timed_calls: i64,
    pub duration_ms: i64,
    pub hist: [i64; SLOTS],
}

impl Default for ToolSums {
    fn default() -> ToolSums {
        ToolSums {
            calls: 0,
            errors: 0,
            timed_calls: 0,
            duration_ms: 0,
            hist: [0; SLOTS],
        }
    }
}

/// A batch's tool rows, pre-aggregated per key.
#[derive(Debug, Default)]
pub struct ToolRows(pub BTreeMap<ToolKey, ToolSums>);

impl ToolRows {
    /// Adds a completed `tool.call` (others are ignored) under the usage key it was rolled up with.
    pub fn add(&mut self, key: &RollupKey, e: &CanonicalEvent) {
        if e.kind != apiary_schema::EventKind::ToolCall || e.data_str("status") != Some("completed")
        {
            return;
        }
        let k = ToolKey {
            bucket: key.bucket,
            user_id: key.user_id.clone(),
            device_id: key.device_id.clone(),
            colony_id: key.colony_id.clone(),
            session_id: key.session_id.clone(),
            runtime: key.runtime.clone(),
            tool_name: e.data_str("tool_name").unwrap_or("").to_string(),
        };
        let s = self.0.entry(k).or_default();
        s.calls += 1;
        if e.data.get("is_error").and_then(serde_json::Value::as_bool) == Some(true) {
            s.errors += 1;
        }
        // Admitted by the usage rule, so within its bound.
        if let Ok(Some(ms)) = apiary_schema::usage::tool_duration_ms(e) {
            s.timed_calls += 1;
            s.duration_ms += ms;
            s.hist[slot(ms)] += 1;
        }
    }
}

/// The unit start an instant falls in (an hour, day or month: [`rollups::hour_of`] and the like).
type Unit = fn(DateTime<Utc>) -> DateTime<Utc>;

/// The narrow tool rollups (no device, colony or session) and the unit of each: UTC hour, day, month.
const TABLES: [(&str, Unit); 3] = [
    ("tool_rollups_hourly", rollups::hour_of),
    ("tool_rollups_daily", rollups::day_of),
    ("tool_rollups_monthly", rollups::month_of),
];

impl ToolSums {
    /// Adds another row's sums, histogram slot by slot.
    fn add(&mut self, other: &ToolSums) {
        self.calls += other.calls;
        self.errors += other.errors;
        self.timed_calls += other.timed_calls;
        self.duration_ms += other.duration_ms;
        for (a, b) in self.hist.iter_mut().zip(&other.hist) {
            *a += b;
        }
    }
}

/// `rows` summed per the key `to` gives each.
fn regroup(rows: &ToolRows, to: impl Fn(&ToolKey) -> ToolKey) -> ToolRows {
    let mut out = ToolRows::default();
    for (k, s) in &rows.0 {
        out.0.entry(to(k)).or_default().add(s);
    }
    out
}

/// `rows` summed per narrow key (device, colony and session empty) at the grain `to` gives. Sorted like
/// the narrow tables' key, since the empty columns compare equal.
fn narrow(rows: &ToolRows, to: Unit) -> ToolRows {
    regroup(rows, |k| ToolKey {
        bucket: to(k.bucket),
        user_id: k.user_id.clone(),
        device_id: String::new(),
        colony_id: String::new(),
        session_id: String::new(),
        runtime: k.runtime.clone(),
        tool_name: k.tool_name.clone(),
    })
}

/// `rows` (narrow ones) summed over users: the tenant tables' key (the user empty as well). Sorted like
/// that key.
fn over_users(rows: &ToolRows) -> ToolRows {
    regroup(rows, |k| ToolKey {
        user_id: String::new(),
        ..k.clone()
    })
}

/// Adds several tenants' rows (a group's, [`crate::store::batch`]) to `tool_rollups` and their narrow
/// sums to `tool_rollups_hourly`, `_daily` and `_monthly`, in one statement, each in (tenant, key)
/// order: `tenants` sorted by id and distinct. Answers those sums summed over users, for the tenant's
/// tables ([`TENANT_TABLES`]), which the caller writes last ([`TenantToolRows`]).
pub async fn upsert(
    tx: &mut Transaction<'_, Postgres>,
    tenants: &[(Uuid, &ToolRows)],
) -> Result<TenantToolRows, sqlx::Error> {
    if tenants.iter().all(|(_, r)| r.0.is_empty()) {
        return Ok(TenantToolRows::default());
    }
    let grains: Vec<Vec<(Uuid, ToolRows)>> = TABLES
        .iter()
        .map(|(_, to)| tenants.iter().map(|(t, r)| (*t, narrow(r, *to))).collect())
        .collect();
    let tenant_rows: Vec<Vec<(Uuid, ToolRows)>> = grains
        .iter()
        .map(|rows| rows.iter().map(|(t, r)| (*t, over_users(r))).collect())
        .collect();
    let q = sqlx::query(UPSERT_SQL.as_str());
    let mut q = bind_rows(q, tenants.iter().map(|(t, r)| (*t, *r)), Key::Wide)?;
    for rows in &grains {
        q = bind_rows(q, rows.iter().map(|(t, r)| (*t, r)), Key::Narrow)?;
    }
    q.execute(&mut **tx).await?;
    Ok(TenantToolRows(tenant_rows))
}

/// The tenant's tool rows of a group, per grain ([`TENANT_TABLES`]' order), as [`upsert`] answers them:
/// they sum every user of a tenant, so concurrent transactions of one tenant meet on them, and they are
/// written last, with the colony rows ([`crate::store::tenant_wide`]).
#[derive(Debug, Default)]
pub struct TenantToolRows(Vec<Vec<(Uuid, ToolRows)>>);

impl TenantToolRows {
    pub fn is_empty(&self) -> bool {
        self.0.iter().flatten().all(|(_, r)| r.0.is_empty())
    }
}

/// The tenant's hourly, daily and monthly tool upserts, each taking its grain's rows from one set of
/// arrays bound from `$first` on ([`bind_tenant_rows`]).
pub fn tenant_sql(first: usize) -> [String; 3] {
    std::array::from_fn(|g| upsert_sql_of(TENANT_TABLES[g], Key::Tenant, first, Some(g)))
}

/// Binds the three tenant tables' rows in one set of arrays, each row marked with its table's grain.
pub fn bind_tenant_rows<'q>(
    q: rollups::Query<'q>,
    rows: &'q TenantToolRows,
) -> Result<rollups::Query<'q>, sqlx::Error> {
    bind_rows(
        q,
        rows.0
            .iter()
            .enumerate()
            .flat_map(|(g, rows)| rows.iter().map(move |(t, r)| (g as i32, *t, r))),
        Key::Tenant,
    )
}

/// The key of a tool rollup: the 15-minute table's, the narrow one (no device, colony or session) or
/// the tenant's (no user either).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Wide,
    Narrow,
    Tenant,
}

impl Key {
    /// The key columns after tenant and bucket, as [`bind_rows`] binds them.
    fn columns(self) -> &'static [&'static str] {
        match self {
            Key::Wide => &[
                "user_id",
                "device_id",
                "colony_id",
                "session_id",
                "runtime",
                "tool_name",
            ],
            Key::Narrow => &["user_id", "runtime", "tool_name"],
            Key::Tenant => &["runtime", "tool_name"],
        }
    }
}

/// A row as [`bind_rows`] takes it: its tenant and its rows, and for the tenant tables, whose three
/// grains share one set of arrays, the grain (the index in [`TENANT_TABLES`]).
trait Rows<'q> {
    fn parts(self) -> (Option<i32>, Uuid, &'q ToolRows);
}

impl<'q> Rows<'q> for (Uuid, &'q ToolRows) {
    fn parts(self) -> (Option<i32>, Uuid, &'q ToolRows) {
        (None, self.0, self.1)
    }
}

impl<'q> Rows<'q> for (i32, Uuid, &'q ToolRows) {
    fn parts(self) -> (Option<i32>, Uuid, &'q ToolRows) {
        (Some(self.0), self.1, self.2)
    }
}

use rollups::Query;

/// Binds `tenants`' rows as the arrays of one [`upsert_sql`]: tenant, bucket, (for the tenant tables
/// the grain,) the key's columns, the four sums, where each row's histogram starts and ends (1-based,
/// inclusive) in the next array, and the histograms without their trailing zero slots flattened into
/// that array.
fn bind_rows<'q, R: Rows<'q>>(
    q: Query<'q>,
    tenants: impl Iterator<Item = R>,
    key: Key,
) -> Result<Query<'q>, sqlx::Error> {
    let mut ids = Vec::new();
    let mut buckets = Vec::new();
    let mut grains = Vec::<i32>::new();
    let mut dims: [Vec<&str>; 6] = Default::default();
    let mut nums: [Vec<i64>; 4] = Default::default();
    let (mut starts, mut ends) = (Vec::<i32>::new(), Vec::<i32>::new());
    let mut hists = Vec::new();
    for r in tenants {
        let (grain, tenant_id, rows) = r.parts();
        for (k, s) in &rows.0 {
            ids.push(tenant_id);
            buckets.push(k.bucket);
            grains.extend(grain);
            for (col, v) in dims.iter_mut().zip([
                &k.user_id,
                &k.device_id,
                &k.colony_id,
                &k.session_id,
                &k.runtime,
                &k.tool_name,
            ]) {
                col.push(v.as_str());
            }
            for (col, v) in nums
                .iter_mut()
                .zip([s.calls, s.errors, s.timed_calls, s.duration_ms])
            {
                col.push(v);
            }
            let used = s.hist.iter().rposition(|n| *n != 0).map_or(0, |i| i + 1);
            // Postgres subscripts are int4: a group of more than 2^31 / SLOTS tool rows is refused.
            let offset = |n: usize| {
                i32::try_from(n).map_err(|_| {
                    sqlx::Error::Encode(
                        "a group's tool histograms exceed an array's int4 subscripts".into(),
                    )
                })
            };
            starts.push(offset(hists.len() + 1)?);
            hists.extend_from_slice(&s.hist[..used]);
            ends.push(offset(hists.len())?);
        }
    }
    let [users, devices, colonies, sessions, runtimes, tools] = dims;
    let dims = match key {
        Key::Wide => vec![users, devices, colonies, sessions, runtimes, tools],
        Key::Narrow => vec![users, runtimes, tools],
        Key::Tenant => vec![runtimes, tools],
    };
    let mut q = q.bind(ids).bind(buckets);
    if key == Key::Tenant {
        q = q.bind(grains);
    }
    for col in dims {
        q = q.bind(col);
    }
    for col in nums {
        q = q.bind(col);
    }
    Ok(q.bind(starts).bind(ends).bind(hists))
}

/// The parameters one [`upsert_sql`] binds with `key` (the tenant tables' grain included).
fn params(key: Key) -> usize {
    2 + usize::from(key == Key::Tenant) + key.columns().len() + 4 + 3
}

/// The upsert into `table` with `key`'s columns, its arrays bound from `$first` on in [`bind_rows`]'
/// order. Rows come in the (sorted) array order; each row's histogram is its slice of the flattened
/// array. The histograms merge element-wise inline (what `apiary_hist_add` does: a function call per
/// conflicting row cost about 2.5× as much, measured in psql; a slot one of them lacks counts 0), and
/// not at all when the rows add no timed call.
fn upsert_sql(table: &str, key: Key, first: usize) -> String {
    upsert_sql_of(table, key, first, None)
}

/// [`upsert_sql`], for a tenant table the rows of `grain` only (its arrays hold the three tables').
fn upsert_sql_of(table: &str, key: Key, first: usize, grain: Option<usize>) -> String {
    let keys = key.columns();
    let grain_type = grain.map(|_| "int4");
    let types = ["uuid", "timestamptz"]
        .into_iter()
        .chain(grain_type)
        .chain(keys.iter().map(|_| "text"))
        .chain(["int8"; 4])
        .chain(["int4"; 2]);
    let arrays: Vec<String> = types
        .enumerate()
        .map(|(i, ty)| format!("${}::{ty}[]", first + i))
        .collect();
    let hist = first + arrays.len();
    let names = keys.join(", ");
    let from_u: Vec<String> = keys.iter().map(|k| format!("u.{k}")).collect();
    let (grain_column, only) = match grain {
        Some(g) => ("grain, ", format!("WHERE u.grain = {g} ")),
        None => ("", String::new()),
    };
    format!(
        "INSERT INTO {table} AS r (tenant_id, bucket, {names}, calls, errors, timed_calls, duration_ms, \
         duration_hist) \
         SELECT u.tenant_id, u.bucket, {from_u}, u.calls, u.errors, u.timed, u.ms, \
         (${hist}::int8[])[u.hist_from : u.hist_to] \
         FROM unnest({arrays}) WITH ORDINALITY \
         AS u(tenant_id, bucket, {grain_column}{names}, calls, errors, timed, ms, hist_from, hist_to, o) \
         {only}ORDER BY u.o \
         ON CONFLICT (tenant_id, bucket, {names}) DO UPDATE SET \
         calls = r.calls + EXCLUDED.calls, errors = r.errors + EXCLUDED.errors, \
         timed_calls = r.timed_calls + EXCLUDED.timed_calls, duration_ms = r.duration_ms + EXCLUDED.duration_ms, \
         duration_hist = CASE WHEN EXCLUDED.timed_calls = 0 THEN r.duration_hist ELSE ARRAY( \
         SELECT COALESCE(x, 0) + COALESCE(y, 0) \
         FROM unnest(r.duration_hist, EXCLUDED.duration_hist) WITH ORDINALITY AS h(x, y, i) ORDER BY i) END",
        from_u = from_u.join(", "),
        arrays = arrays.join(", "),
    )
}

/// The tenant's tool rollups (no user either), by UTC hour, day and month: the per-user rows of the same
/// grain summed over users.
const TENANT_TABLES: [&str; 3] = [
    "tool_rollups_tenant_hourly",
    "tool_rollups_tenant_daily",
    "tool_rollups_tenant_monthly",
];

/// The 15-minute rows (parameters 1–15) and the hourly, daily and monthly ones (12 parameters each,
/// from 16) as one statement: one round trip, and the same statement in every transaction, so the four
/// tables' rows are always locked in the same order.
static UPSERT_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let parts: Vec<String> = TABLES
        .iter()
        .enumerate()
        .map(|(i, (table, _))| {
            let first = 1 + params(Key::Wide) + i * params(Key::Narrow);
            format!(
                "{} AS ({})",
                table.trim_start_matches("tool_rollups_"),
                upsert_sql(table, Key::Narrow, first)
            )
        })
        .collect();
    format!(
        "WITH {} {}",
        parts.join(", "),
        upsert_sql("tool_rollups", Key::Wide, 1)
    )
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_numbers_each_tables_parameters_after_the_last() {
        let sql = UPSERT_SQL.as_str();
        let quarter = &sql[sql.find("INSERT INTO tool_rollups AS r").unwrap()..];
        assert!(
            quarter.contains("unnest($1::uuid[], $2::timestamptz[], $3::text[]"),
            "{sql}"
        );
        assert!(
            quarter.contains("$12::int8[], $13::int4[], $14::int4[]) WITH ORDINALITY"),
            "{sql}"
        );
        assert!(
            quarter.contains("($15::int8[])[u.hist_from : u.hist_to]"),
            "{sql}"
        );
        let hourly = &sql[sql.find("INSERT INTO tool_rollups_hourly").unwrap()..];
        assert!(hourly.contains("unnest($16::uuid[], $17::timestamptz[], $18::text[], $19::text[], $20::text[], $21::int8[]"), "{sql}");
        assert!(hourly.contains("($27::int8[])[u.hist_from"), "{sql}");
        let monthly = &sql[sql.find("INSERT INTO tool_rollups_monthly").unwrap()..];
        assert!(monthly.contains("unnest($40::uuid[]"), "{sql}");
        assert!(monthly.contains("($51::int8[])"), "{sql}");
        assert!(
            !sql.contains("$52") && !sql.contains("tool_rollups_tenant"),
            "{sql}"
        );
        // The tenant's three tables share one set of arrays, each taking its grain's rows.
        let parts = tenant_sql(52);
        for (g, table) in TENANT_TABLES.iter().enumerate() {
            let part = &parts[g];
            assert!(
                part.starts_with(&format!("INSERT INTO {table} AS r")),
                "{part}"
            );
            assert!(
                part.contains("(tenant_id, bucket, runtime, tool_name, calls, errors"),
                "{part}"
            );
            assert!(part.contains("unnest($52::uuid[], $53::timestamptz[], $54::int4[], $55::text[], $56::text[], $57::int8[], $58::int8[], $59::int8[], $60::int8[], $61::int4[], $62::int4[]) WITH ORDINALITY AS u(tenant_id, bucket, grain, runtime, tool_name, calls"), "{part}");
            assert!(
                part.contains(&format!("WHERE u.grain = {g} ORDER BY u.o")),
                "{part}"
            );
            assert!(part.contains("($63::int8[])[u.hist_from"), "{part}");
            assert!(
                part.contains("ON CONFLICT (tenant_id, bucket, runtime, tool_name)"),
                "{part}"
            );
            assert!(!part.contains("$64"), "{part}");
        }
    }

    #[test]
    fn narrow_rows_sum_every_session_and_histogram_slot_of_their_unit() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let mut rows = ToolRows::default();
        for (bucket, session, tool, ms) in [
            ("2026-11-03T10:15:00Z", "s1", "grep", 5),
            ("2026-11-03T10:45:00Z", "s2", "grep", 2000),
            ("2026-11-03T11:00:00Z", "s1", "grep", 7),
            ("2026-11-03T10:15:00Z", "s1", "edit", 1),
        ] {
            let k = ToolKey {
                bucket: at(bucket),
                user_id: "alice".into(),
                device_id: "d".into(),
                colony_id: String::new(),
                session_id: session.into(),
                runtime: "hive".into(),
                tool_name: tool.into(),
            };
            let s = rows.0.entry(k).or_default();
            s.calls += 1;
            s.timed_calls += 1;
            s.duration_ms += ms;
            s.hist[slot(ms)] += 1;
        }
        let hourly = narrow(&rows, rollups::hour_of);
        let keys: Vec<(String, &str)> = hourly
            .0
            .keys()
            .map(|k| (k.bucket.to_rfc3339(), k.tool_name.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("2026-11-03T10:00:00+00:00".to_string(), "edit"),
                ("2026-11-03T10:00:00+00:00".to_string(), "grep"),
                ("2026-11-03T11:00:00+00:00".to_string(), "grep"),
            ]
        );
        let monthly = narrow(&rows, rollups::month_of);
        let grep = monthly
            .0
            .iter()
            .find(|(k, _)| k.tool_name == "grep")
            .unwrap()
            .1;
        assert_eq!((grep.calls, grep.duration_ms), (3, 2012));
        assert_eq!(grep.hist.iter().sum::<i64>(), 3);
        assert_eq!(
            (
                grep.hist[slot(5)],
                grep.hist[slot(7)],
                grep.hist[slot(2000)]
            ),
            (1, 1, 1)
        );
    }

    #[test]
    fn tenant_rows_sum_every_user_of_their_unit_runtime_and_tool() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let mut rows = ToolRows::default();
        for (bucket, user, runtime, ms) in [
            ("2026-11-03T10:15:00Z", "alice", "hive", 5),
            ("2026-11-03T10:30:00Z", "bob", "hive", 2000),
            ("2026-11-03T10:30:00Z", "bob", "claude-code", 7),
            ("2026-11-04T09:00:00Z", "carol", "hive", 1),
        ] {
            let k = ToolKey {
                bucket: at(bucket),
                user_id: user.into(),
                device_id: format!("{user}-laptop"),
                colony_id: String::new(),
                session_id: format!("{user}-s"),
                runtime: runtime.into(),
                tool_name: "grep".into(),
            };
            let s = rows.0.entry(k).or_default();
            s.calls += 1;
            s.timed_calls += 1;
            s.duration_ms += ms;
            s.hist[slot(ms)] += 1;
        }
        let view = |rows: &ToolRows| -> Vec<(String, String, String, i64, i64)> {
            rows.0
                .iter()
                .map(|(k, s)| {
                    (
                        k.bucket.to_rfc3339(),
                        k.user_id.clone(),
                        k.runtime.clone(),
                        s.calls,
                        s.duration_ms,
                    )
                })
                .collect()
        };
        let day = |d: &str| format!("2026-11-0{d}T00:00:00+00:00");
        assert_eq!(
            view(&over_users(&narrow(&rows, rollups::day_of))),
            [
                (day("3"), String::new(), "claude-code".into(), 1, 7),
                (day("3"), String::new(), "hive".into(), 2, 2005),
                (day("4"), String::new(), "hive".into(), 1, 1),
            ]
        );
        let month = over_users(&narrow(&rows, rollups::month_of));
        let hive = month.0.iter().find(|(k, _)| k.runtime == "hive").unwrap().1;
        assert_eq!((hive.calls, hive.duration_ms), (3, 2006));
        assert_eq!(
            (
                hive.hist[slot(1)],
                hive.hist[slot(5)],
                hive.hist[slot(2000)]
            ),
            (1, 1, 1)
        );
    }

    #[test]
    fn slots_follow_the_bounds_like_width_bucket() {
        assert_eq!(slot(0), 0);
        assert_eq!(slot(1), 1);
        assert_eq!(slot(5), 4);
        assert_eq!(slot(6), 5);
        assert_eq!(slot(1447), 20);
        assert_eq!(slot(1448), 21);
        assert_eq!(slot(67_108_863), SLOTS - 2);
        assert_eq!(slot(i64::MAX), SLOTS - 1);
        for w in DURATION_BOUNDS_MS.windows(2) {
            assert!(w[0] < w[1] && w[1] <= 2 * w[0], "{w:?}");
        }
    }

    #[test]
    fn the_migration_backfills_with_the_same_bounds() {
        let sql = include_str!("../../migrations/20261128000000_tool_durations.sql");
        let list: Vec<String> = DURATION_BOUNDS_MS.iter().map(|b| b.to_string()).collect();
        assert!(sql.contains(&format!("'{{{}}}'::int8[]", list.join(","))));
        assert!(sql.contains(&format!("ARRAY[{SLOTS}]")));
    }

    fn hist_of(durations: &[i64]) -> Vec<i128> {
        let mut h = vec![0i128; SLOTS];
        for d in durations {
            h[slot(*d)] += 1;
        }
        h
    }

    #[test]
    fn percentiles_are_nearest_rank_within_their_slot() {
        assert_eq!(percentile(&hist_of(&[]), 0.5), None);
        assert_eq!(percentile(&hist_of(&[0, 1, 2, 3]), 0.5), Some(1));
        assert_eq!(percentile(&hist_of(&[0, 1, 2, 3]), 0.95), Some(3));
        // 100 calls of 1000..=1099 ms all fall in [724, 1024) or [1024, 1448).
        let d: Vec<i64> = (1000..1100).collect();
        let p50 = percentile(&hist_of(&d), 0.5).unwrap();
        assert_eq!(slot(p50), slot(1049), "p50 {p50}");
        let p95 = percentile(&hist_of(&d), 0.95).unwrap();
        assert_eq!(slot(p95), slot(1094), "p95 {p95}");
        assert_eq!(percentile(&hist_of(&[90_000_000]), 0.5), Some(67_108_864));
        // One call: the middle of its slot's range.
        assert_eq!(percentile(&hist_of(&[1500]), 0.5), Some(1748));
    }

    #[test]
    fn an_estimate_is_always_in_the_exact_percentiles_slot() {
        let mut seed = 17u64;
        for _ in 0..200 {
            let n = 1 + (seed % 50) as usize;
            let mut d: Vec<i64> = (0..n)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((seed >> 33) % 100_000) as i64
                })
                .collect();
            d.sort();
            for p in [0.5, 0.95] {
                let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
                let exact = d[rank - 1];
                let est = percentile(&hist_of(&d), p).unwrap();
                assert_eq!(slot(est), slot(exact), "p{p} of {d:?}: {est} vs {exact}");
            }
        }
    }
}
