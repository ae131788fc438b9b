//! Keeping every stored rollup row within its bigint columns, per event.
//!
//! A row's sums grow without bound (one row per 15 minutes × session × model can take any number of
//! events), while its columns are bigints. Letting Postgres raise `bigint out of range` (22003) would make
//! the whole batch fail again on every retry — a permanent 500 the agent retries forever — and Rust's
//! `+` would wrap in release builds. Instead the batch writer admits events into the rollup one at a time,
//! in `event_id` order ([`Fit`]): an event is admitted when its 15-minute row, its hourly row, its
//! narrow hourly row (`rollups::narrow_of`), its daily and monthly rows (`rollups::daily_of`,
//! `monthly_of`), its tenant's month for its runtime (`rollups::tenant_monthly_of`, which bounds
//! the tenant's tool rows) *and* its tenant's month for its model and runtime
//! (`rollups::tenant_model_monthly_of`, which bounds the colony rows) stay within `i64::MAX` counting
//! what is already stored ([`Bases`]) and what this batch admitted before it;
//! otherwise it is rejected with [`REASON`] and nothing of it is stored.
//!
//! The colony rows (`usage_rollups_colony_daily`, `_monthly`) sum part of the tenant's hours of one
//! model and runtime in a month (every user's), never negative once a transaction ends, so each is at
//! most the tenant's month for that model and runtime; that month's stored part is read from the
//! monthly colony rows summed over colonies, which hold all of it.
//!
//! The tenant's month counts only what the tenant's tool rows hold (tool calls, errors and durations,
//! [`tool_part`]); it is stored nowhere as such, so its stored part is read from the tenant's monthly
//! tool rows summed over tools (clamped to `i64::MAX`, which is full anyway).
//!
//! The stored totals are not read on the common path: the first attempt assumes empty rows (which already
//! catches a batch that overflows on its own). Only when the upsert then meets 22003 does the writer read
//! the rows' totals ([`fetch`]) and try again (`store::batch::write`); a concurrent batch that grew the
//! same row in between just means another round.

use std::collections::BTreeMap;

use sqlx::PgPool;
use uuid::Uuid;

use crate::rollups::{
    daily_of, hourly_of, monthly_of, narrow_of, tenant_model_monthly_of, tenant_monthly_of,
    RollupKey, Usage, COLUMNS,
};

/// Why an event was rejected for overflow.
pub const REASON: &str =
    "usage: the totals of its rollup row would exceed the supported range (2^63 - 1 per column)";

/// What the rows a batch touches already hold (absent = empty).
#[derive(Debug, Default)]
pub struct Bases {
    quarter: BTreeMap<RollupKey, Usage>,
    /// The coarser rows, in the order of [`COARSER`].
    coarser: [BTreeMap<RollupKey, Usage>; 6],
}

/// The rows an event's 15-minute row adds to (hourly, narrow hourly, daily and monthly), the tenant's
/// month that bounds the tenant's tool rows, and the tenant's month of a model that bounds the colony
/// rows.
const COARSER: [fn(&RollupKey) -> RollupKey; 6] = [
    hourly_of,
    narrow_of,
    daily_of,
    monthly_of,
    tenant_monthly_of,
    tenant_model_monthly_of,
];

/// Where in [`COARSER`] the tenant's month is.
const TENANT_MONTH: usize = 4;

/// What of an event's usage the `i`-th row of [`COARSER`] adds up: all of it, or for the tenant's month
/// only the tool columns, which are all the tenant's tool rows hold.
fn part(i: usize, u: &Usage) -> Usage {
    match i {
        TENANT_MONTH => tool_part(u),
        _ => *u,
    }
}

/// The tool calls, errors and durations of `u`, nothing else.
fn tool_part(u: &Usage) -> Usage {
    Usage {
        tool_calls: u.tool_calls,
        tool_errors: u.tool_errors,
        tool_duration_ms: u.tool_duration_ms,
        ..Usage::default()
    }
}

/// Admits events into a batch's rollup (see the module notes).
///
/// Most batches cannot come near the range: while the largest magnitude of any stored row's column plus
/// the summed magnitudes of the events admitted so far stays within `i64::MAX`, no row can leave it (a
/// row's total is its stored value plus some of those events), so an event is admitted by adding it to
/// its 15-minute row alone. The first event that would take that bound past the range switches the
/// batch to the exact check: the coarser rows are summed from the 15-minute rows admitted so far (all of
/// them were admitted by the exact check too, since every row fitted), and from then on each event's six
/// rows are checked as above.
#[derive(Debug)]
pub struct Fit<'a> {
    bases: &'a Bases,
    quarter: BTreeMap<RollupKey, Usage>,
    /// The coarser rows admitted so far, once the exact check is on (`None` while the bound holds).
    coarser: Option<[BTreeMap<RollupKey, Usage>; 6]>,
    /// Per column: the largest magnitude of a stored row plus the magnitudes of the admitted events.
    bound: [i128; COLUMNS],
    rejected: Vec<Uuid>,
}

fn with(base: Option<&Usage>, batch: Option<&Usage>, u: &Usage) -> Usage {
    let mut t = base.copied().unwrap_or_default();
    if let Some(b) = batch {
        t.add(b);
    }
    t.add(u);
    t
}

impl<'a> Fit<'a> {
    pub fn new(bases: &'a Bases) -> Fit<'a> {
        let mut bound = [0i128; COLUMNS];
        for row in std::iter::once(&bases.quarter)
            .chain(&bases.coarser)
            .flat_map(BTreeMap::values)
        {
            for (b, v) in bound.iter_mut().zip(row.columns()) {
                *b = (*b).max(v.saturating_abs());
            }
        }
        Fit {
            bases,
            quarter: BTreeMap::new(),
            coarser: None,
            bound,
            rejected: vec![],
        }
    }

    /// Adds the event's usage to its row, or records it as rejected when a row would overflow.
    pub fn add(&mut self, key: RollupKey, usage: &Usage, event_id: Uuid) {
        let coarser = match &mut self.coarser {
            Some(coarser) => coarser,
            None => {
                let mut next = self.bound;
                for (b, v) in next.iter_mut().zip(usage.columns()) {
                    *b = b.saturating_add(v.saturating_abs());
                }
                if next.iter().all(|b| *b <= i128::from(i64::MAX)) {
                    self.bound = next;
                    self.quarter.entry(key).or_default().add(usage);
                    return;
                }
                let mut coarser: [BTreeMap<RollupKey, Usage>; 6] = Default::default();
                for (row, sum) in &self.quarter {
                    for (i, (rows, to)) in coarser.iter_mut().zip(COARSER).enumerate() {
                        rows.entry(to(row)).or_default().add(&part(i, sum));
                    }
                }
                self.coarser.insert(coarser)
            }
        };
        let rows = COARSER.map(|to| to(&key));
        let fits = with(self.bases.quarter.get(&key), self.quarter.get(&key), usage).fits_row()
            && rows.iter().enumerate().all(|(i, row)| {
                with(
                    self.bases.coarser[i].get(row),
                    coarser[i].get(row),
                    &part(i, usage),
                )
                .fits_row()
            });
        if !fits {
            self.rejected.push(event_id);
            return;
        }
        self.quarter.entry(key).or_default().add(usage);
        for (i, row) in rows.into_iter().enumerate() {
            coarser[i].entry(row).or_default().add(&part(i, usage));
        }
    }

    /// The pre-aggregated 15-minute rows, or the events that did not fit.
    pub fn finish(self) -> Result<BTreeMap<RollupKey, Usage>, Vec<Uuid>> {
        if self.rejected.is_empty() {
            Ok(self.quarter)
        } else {
            Err(self.rejected)
        }
    }
}

/// Whether a database error is Postgres' "out of range" (SQLSTATE 22003, e.g. bigint overflow).
pub fn is_out_of_range(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.code().as_deref() == Some("22003"))
}

/// The stored totals of the 15-minute rows `keys` and of the coarser rows they add to ([`COARSER`]).
pub async fn fetch(
    pool: &PgPool,
    tenant_id: Uuid,
    keys: &[RollupKey],
) -> Result<Bases, sqlx::Error> {
    let rows_of = |to: fn(&RollupKey) -> RollupKey| {
        let mut h: Vec<RollupKey> = keys.iter().map(to).collect();
        h.sort();
        h.dedup();
        h
    };
    let sources = [
        "usage_rollups_hourly",
        &narrow_source("usage_rollups_narrow"),
        &narrow_source("usage_rollups_daily"),
        &narrow_source("usage_rollups_monthly"),
        TENANT_MONTHS,
        &TENANT_MODEL_MONTHS,
    ];
    let mut coarser: [BTreeMap<RollupKey, Usage>; 6] = Default::default();
    for ((rows, to), source) in coarser.iter_mut().zip(COARSER).zip(sources) {
        *rows = read(pool, tenant_id, &rows_of(to), source).await?;
    }
    Ok(Bases {
        quarter: read(pool, tenant_id, keys, "usage_rollups").await?,
        coarser,
    })
}

type SumsRow = (
    chrono::DateTime<chrono::Utc>,
    String,
    String,
    String,
    String,
    String,
    String,
    Vec<i64>,
);

/// A table with the narrow key (narrow hourly, daily, monthly) with the wide key's columns (colony and
/// session empty, as `narrow_of` gives them), so one statement reads every table.
fn narrow_source(table: &str) -> String {
    format!("(SELECT *, ''::text AS colony_id, ''::text AS session_id FROM {table})")
}

/// The tenant's months per runtime ([`tenant_monthly_of`]) as rows with the usage rollups' columns: the
/// monthly tenant tool rows summed over tools into `tool_calls`, `tool_errors` and `tool_duration_ms`
/// (each clamped to `i64::MAX`), every other column 0 (the month counts only those, [`tool_part`]).
const TENANT_MONTHS: &str = "(SELECT tenant_id, bucket, ''::text AS user_id, ''::text AS device_id,
        ''::text AS colony_id, ''::text AS session_id, ''::text AS model, runtime,
        0::int8 AS input_tokens, 0::int8 AS output_tokens, 0::int8 AS cached_tokens,
        0::int8 AS cache_creation_tokens, 0::int8 AS cost_nanos, 0::int8 AS llm_calls,
        0::int8 AS unpriced_turns, least(sum(calls), 9223372036854775807)::int8 AS tool_calls,
        least(sum(errors), 9223372036854775807)::int8 AS tool_errors, 0::int8 AS events,
        least(sum(duration_ms), 9223372036854775807)::int8 AS tool_duration_ms, 0::int8 AS active_ms,
        0::int8 AS cost_reported_nanos, 0::int8 AS cost_estimated_nanos, 0::int8 AS estimated_turns
    FROM tool_rollups_tenant_monthly GROUP BY tenant_id, bucket, runtime)";

/// The tenant's months per model and runtime ([`tenant_model_monthly_of`]) as rows with the usage
/// rollups' columns: the monthly colony rows summed over colonies (each column clamped to `i64::MAX`).
static TENANT_MODEL_MONTHS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let sums: Vec<String> = crate::rollups::SUM_COLUMNS
        .iter()
        .map(|c| format!("least(sum({c}), 9223372036854775807)::int8 AS {c}"))
        .collect();
    format!(
        "(SELECT tenant_id, bucket, ''::text AS user_id, ''::text AS device_id, ''::text AS colony_id,
            ''::text AS session_id, model, runtime, {}
        FROM usage_rollups_colony_monthly GROUP BY tenant_id, bucket, model, runtime)",
        sums.join(", ")
    )
});

/// The stored sums of the rows `keys` of `table` (a table or a parenthesised query with its columns).
async fn read(
    pool: &PgPool,
    tenant_id: Uuid,
    keys: &[RollupKey],
    table: &str,
) -> Result<BTreeMap<RollupKey, Usage>, sqlx::Error> {
    let col = |f: fn(&RollupKey) -> &str| keys.iter().map(f).collect::<Vec<&str>>();
    let rows: Vec<SumsRow> = sqlx::query_as(&format!(
        "SELECT r.bucket, r.user_id, r.device_id, r.colony_id, r.session_id, r.model, r.runtime,
            ARRAY[r.input_tokens, r.output_tokens, r.cached_tokens, r.cache_creation_tokens, r.cost_nanos,
                  r.llm_calls, r.unpriced_turns, r.tool_calls, r.tool_errors, r.events, r.tool_duration_ms,
                  r.active_ms, r.cost_reported_nanos, r.cost_estimated_nanos, r.estimated_turns]
         FROM unnest($2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::text[])
             AS k(bucket, user_id, device_id, colony_id, session_id, model, runtime)
         JOIN {table} r ON r.tenant_id = $1 AND r.bucket = k.bucket AND r.user_id = k.user_id
             AND r.device_id = k.device_id AND r.colony_id = k.colony_id AND r.session_id = k.session_id
             AND r.model = k.model AND r.runtime = k.runtime"
    ))
    .bind(tenant_id)
    .bind(keys.iter().map(|k| k.bucket).collect::<Vec<_>>())
    .bind(col(|k| &k.user_id))
    .bind(col(|k| &k.device_id))
    .bind(col(|k| &k.colony_id))
    .bind(col(|k| &k.session_id))
    .bind(col(|k| &k.model))
    .bind(col(|k| &k.runtime))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(bucket, user_id, device_id, colony_id, session_id, model, runtime, sums)| {
                let key = RollupKey {
                    bucket,
                    user_id,
                    device_id,
                    colony_id,
                    session_id,
                    model,
                    runtime,
                };
                let mut cols = [0i128; crate::rollups::COLUMNS];
                for (c, v) in cols.iter_mut().zip(sums) {
                    *c = i128::from(v);
                }
                (key, Usage::from_columns(cols))
            },
        )
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollups::hour_of;
    use chrono::{DateTime, Utc};
    use proptest::prelude::*;

    const MAX: i128 = i64::MAX as i128;

    fn key(minute: u32) -> RollupKey {
        let t: DateTime<Utc> = "2026-11-03T10:00:00Z".parse().unwrap();
        RollupKey {
            bucket: crate::rollups::bucket_of(t + chrono::Duration::minutes(i64::from(minute))),
            user_id: "u".into(),
            device_id: String::new(),
            colony_id: String::new(),
            session_id: "s".into(),
            model: "m".into(),
            runtime: "hive".into(),
        }
    }

    fn cost(nanos: i128) -> Usage {
        Usage {
            cost_nanos: nanos,
            events: 1,
            llm_calls: 1,
            ..Usage::default()
        }
    }

    #[test]
    fn a_batch_that_overflows_on_its_own_keeps_what_fits_and_rejects_the_rest() {
        let bases = Bases::default();
        let mut fit = Fit::new(&bases);
        let per = 1_000_000_000_000_000; // the per-event bound: 10^6 USD in nano-dollars
        let ids: Vec<Uuid> = (0..9300).map(|_| Uuid::new_v4()).collect();
        for id in &ids {
            fit.add(key(0), &cost(per), *id);
        }
        let rejected = fit.finish().unwrap_err();
        // 9223 events fit under 2^63 - 1 (9.223e18); the 77 after them do not.
        assert_eq!(rejected, ids[9223..].to_vec());
    }

    #[test]
    fn stored_totals_and_the_hourly_row_count_too() {
        let mut bases = Bases::default();
        bases.coarser[0].insert(
            RollupKey {
                bucket: hour_of(key(0).bucket),
                ..key(0)
            },
            cost(MAX - 10),
        );
        let mut fit = Fit::new(&bases);
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        fit.add(key(0), &cost(6), a);
        fit.add(key(20), &cost(6), b); // another quarter of the same hour: the hourly row is full
        fit.add(key(65), &cost(6), c); // the next hour is empty
        assert_eq!(fit.finish().unwrap_err(), vec![b]);
    }

    #[test]
    fn the_narrow_row_sums_sessions_so_it_can_fill_first() {
        // Two sessions' hourly rows each have room; their narrow row (same user, model, hour) does not.
        let other = RollupKey {
            session_id: "s2".into(),
            ..key(0)
        };
        let mut bases = Bases::default();
        bases.coarser[0].insert(hourly_of(&key(0)), cost(MAX / 2));
        bases.coarser[0].insert(hourly_of(&other), cost(MAX / 2 - 1));
        bases.coarser[1].insert(narrow_of(&key(0)), cost(MAX - 2)); // their sum
        let mut fit = Fit::new(&bases);
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        fit.add(key(5), &cost(2), a);
        fit.add(other.clone(), &cost(2), b); // 2 left in the narrow row, both taken by `a`
        assert_eq!(fit.finish().unwrap_err(), vec![b]);
    }

    #[test]
    fn the_month_sums_days_so_it_can_fill_first() {
        // Each day's row has room; the month's (the same user and model on other days) does not.
        let next_week = RollupKey {
            bucket: key(0).bucket + chrono::Duration::days(7),
            ..key(0)
        };
        let mut bases = Bases::default();
        bases.coarser[2].insert(daily_of(&key(0)), cost(MAX / 2));
        bases.coarser[2].insert(daily_of(&next_week), cost(MAX / 2 - 3));
        bases.coarser[3].insert(monthly_of(&key(0)), cost(MAX - 3)); // their sum
        let mut fit = Fit::new(&bases);
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        fit.add(key(5), &cost(2), a);
        fit.add(next_week.clone(), &cost(2), b); // 1 left in the month
        let next_month = RollupKey {
            bucket: key(0).bucket + chrono::Duration::days(31),
            ..key(0)
        };
        fit.add(next_month, &cost(2), c); // December is empty
        assert_eq!(fit.finish().unwrap_err(), vec![b]);
    }

    #[test]
    fn the_tenants_month_sums_users_so_it_can_fill_first() {
        // Each user's month has room for a long tool call; the tenant's month for the runtime (what
        // its tool rows hold, every user and tool together) has room for one.
        let call = |ms: i128| Usage {
            tool_calls: 1,
            tool_duration_ms: ms,
            events: 1,
            ..Usage::default()
        };
        let tool = |user: &str| RollupKey {
            user_id: user.into(),
            model: String::new(),
            ..key(0)
        };
        let per = 1_000_000_000_000; // the per-event bound of a duration
        let mut bases = Bases::default();
        bases.coarser[3].insert(monthly_of(&tool("u")), call(MAX / 2));
        bases.coarser[3].insert(monthly_of(&tool("v")), call(MAX / 2 - per - 1));
        bases.coarser[4].insert(tenant_monthly_of(&tool("u")), call(MAX - per - 1));
        let mut fit = Fit::new(&bases);
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        fit.add(tool("v"), &call(per), a);
        fit.add(tool("u"), &call(per), b); // the tenant's month is full
        let other_runtime = RollupKey {
            runtime: "claude-code".into(),
            ..tool("u")
        };
        fit.add(other_runtime, &call(per), c); // its month for another runtime is empty
        assert_eq!(fit.finish().unwrap_err(), vec![b]);
    }

    #[test]
    fn the_tenants_month_of_a_model_sums_users_so_it_can_fill_first() {
        // Each user's month of the model has room; the tenant's month of it (what its colony rows hold,
        // every user and colony together) has room for one more turn.
        let turn = |user: &str| RollupKey {
            user_id: user.into(),
            ..key(0)
        };
        let mut bases = Bases::default();
        bases.coarser[3].insert(monthly_of(&turn("u")), cost(MAX / 2));
        bases.coarser[3].insert(monthly_of(&turn("v")), cost(MAX / 2 - 3));
        bases.coarser[5].insert(tenant_model_monthly_of(&turn("u")), cost(MAX - 3));
        let mut fit = Fit::new(&bases);
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        fit.add(turn("v"), &cost(2), a);
        fit.add(turn("u"), &cost(2), b); // the tenant's month of the model is full
        let other_model = RollupKey {
            model: "other".into(),
            ..turn("u")
        };
        fit.add(other_model, &cost(2), c); // its month of another model is empty
        assert_eq!(fit.finish().unwrap_err(), vec![b]);
    }

    /// The exact check alone, event by event: each of the seven rows (stored + admitted + the event)
    /// within bigint. What [`Fit`] must decide, whether or not it took the shortcut.
    fn exact_only(
        bases: &Bases,
        events: &[(RollupKey, Usage, Uuid)],
    ) -> (BTreeMap<RollupKey, Usage>, Vec<Uuid>) {
        let mut quarter: BTreeMap<RollupKey, Usage> = BTreeMap::new();
        let mut coarser: [BTreeMap<RollupKey, Usage>; 6] = Default::default();
        let mut rejected = vec![];
        for (key, usage, id) in events {
            let rows = COARSER.map(|to| to(key));
            let fits = with(bases.quarter.get(key), quarter.get(key), usage).fits_row()
                && (0..COARSER.len()).all(|i| {
                    with(
                        bases.coarser[i].get(&rows[i]),
                        coarser[i].get(&rows[i]),
                        &part(i, usage),
                    )
                    .fits_row()
                });
            if fits {
                quarter.entry(key.clone()).or_default().add(usage);
                for (i, row) in rows.into_iter().enumerate() {
                    coarser[i].entry(row).or_default().add(&part(i, usage));
                }
            } else {
                rejected.push(*id);
            }
        }
        (quarter, rejected)
    }

    proptest! {
        /// Over sessions, users, hours and days, with stored rows anywhere from empty to nearly full
        /// and events from small to the per-event bound: the shortcut while no row can overflow, and
        /// the switch to the exact check part-way through a batch, decide every event as the exact
        /// check alone does.
        #[test]
        fn the_shortcut_decides_every_event_as_the_exact_check_does(
            stored in proptest::collection::vec(
                (0usize..4, 0u32..3000, 0usize..7, prop_oneof![0i128..=MAX, (MAX - 200_000_000_000_000_000)..=MAX]),
                0..6,
            ),
            events in proptest::collection::vec((0usize..4, 0u32..3000, 0i128..=1_000_000_000_000_000, 0i128..=1_000_000), 1..300),
        ) {
            // Four keys (two sessions of one user, a session of another, an empty session) at minutes
            // spread over two days.
            let at = |k: usize, minute: u32| RollupKey {
                user_id: if k == 2 { "v".into() } else { "u".into() },
                session_id: ["s", "s2", "s3", ""][k].into(),
                ..key(minute)
            };
            // Costs and tool durations alike, so that the tenant's month (tool columns only, both
            // users) can fill first too.
            let spent = |n: i128| Usage { tool_duration_ms: n, ..cost(n) };
            let mut bases = Bases::default();
            for (k, minute, row, nanos) in stored {
                let q = at(k, minute);
                match row {
                    0 => bases.quarter.insert(q, spent(nanos)),
                    r => bases.coarser[r - 1].insert(COARSER[r - 1](&q), spent(nanos)),
                };
            }
            let events: Vec<(RollupKey, Usage, Uuid)> = events
                .into_iter()
                .map(|(k, minute, nanos, tokens)| {
                    (at(k, minute), Usage { input_tokens: tokens, ..spent(nanos) }, Uuid::new_v4())
                })
                .collect();
            let mut fit = Fit::new(&bases);
            for (key, usage, id) in &events {
                fit.add(key.clone(), usage, *id);
            }
            let (want_rows, want_rejected) = exact_only(&bases, &events);
            match fit.finish() {
                Ok(rows) => {
                    prop_assert!(want_rejected.is_empty(), "rejected by the exact check: {want_rejected:?}");
                    prop_assert_eq!(rows, want_rows);
                }
                Err(rejected) => prop_assert_eq!(rejected, want_rejected),
            }
        }

        /// Whatever the stored totals and the events (each within the per-event bounds), the admitted
        /// rows and their hourly, daily and monthly sums stay within bigint, and an event is rejected
        /// only when it would not have fit.
        #[test]
        fn admitted_rows_never_exceed_bigint(
            base in 0..=MAX,
            events in proptest::collection::vec((0u32..120, 0i128..=1_000_000_000_000_000, 0i128..=1_000_000_000_000), 1..200),
        ) {
            let mut bases = Bases::default();
            bases.quarter.insert(key(0), cost(base));
            for (i, to) in COARSER.into_iter().enumerate() {
                bases.coarser[i].insert(to(&key(0)), cost(base));
            }
            let mut fit = Fit::new(&bases);
            let mut expect_rejected = vec![];
            // Minutes 0..120 are two hours of one day (and month): the day's row holds both.
            let mut hour_totals: BTreeMap<DateTime<Utc>, i128> = BTreeMap::new();
            hour_totals.insert(hour_of(key(0).bucket), base);
            let mut day_total = base;
            for (minute, nanos, tokens) in events {
                let u = Usage { input_tokens: tokens, ..cost(nanos) };
                let id = Uuid::new_v4();
                let h = hour_totals.entry(hour_of(key(minute).bucket)).or_default();
                if *h + nanos > MAX || day_total + nanos > MAX {
                    expect_rejected.push(id);
                } else {
                    *h += nanos;
                    day_total += nanos;
                }
                fit.add(key(minute), &u, id);
            }
            let rejected = match fit.finish() {
                Ok(rows) => {
                    for (k, u) in &rows {
                        let stored = bases.quarter.get(k).copied().unwrap_or_default();
                        let mut t = stored;
                        t.add(u);
                        prop_assert!(t.fits_row(), "{k:?}: {t:?}");
                    }
                    vec![]
                }
                Err(r) => r,
            };
            prop_assert_eq!(rejected, expect_rejected);
        }
    }
}
