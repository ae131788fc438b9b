//! Re-pricing a past period (`POST /v1/prices/reprice`): every stored LLM turn of the tenant whose
//! `effective_at` is in `[from, to)` gets the estimate the prices in force *now* give it, and the rollups
//! change by exactly the difference.
//!
//! ## Exact, bounded, idempotent
//! - The turns are visited in `(effective_at, event_id)` order, one UTC day (one `events` partition) at
//!   a time, in transactions of at most [`CHUNK`] turns. Each transaction locks its turns
//!   (`FOR UPDATE`), computes each turn's usage with its *stored* estimate and with the new one (the
//!   shared rule, [`Usage::of_data`] and [`Usage::with_estimate`]), writes the new estimates into
//!   `events`, adds the differences to the turns' rollup rows (both tables, in key order, like a batch:
//!   [`rollups::upsert`]) and its counts to the audit row — all or nothing.
//! - So after a run the rollups equal a raw recomputation of the range, and a second run changes
//!   nothing (every stored estimate already is the new one). Two runs at once serialize on the turns'
//!   row locks: the second sees the first's estimates and finds nothing more to change.
//! - Batches never wait on an existing event row, and lock rollup rows in the same key order, so a run
//!   and the ingest cannot deadlock.
//!
//! ## Limits
//! Only stored events can be re-priced: beyond `retention_days` the raw turns are gone and their rollups
//! keep the estimate they had. A batch that read the tenant's prices before a price change committed
//! and stores its turns after the run passed them keeps the old estimate; running again fixes that. The
//! live stream is not told of the changed totals. `events` has no index: each transaction scans its
//! day's partition once.

use std::collections::BTreeMap;

use apiary_schema::prices::PriceEntry;
use apiary_schema::EventKind;
use chrono::{DateTime, Duration, DurationRound, Utc};
use serde::Serialize;
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::ApiError;
use crate::rollups::{self, bucket_of, RollupKey, Usage};

/// Most turns re-priced in one transaction.
pub const CHUNK: i64 = 1000;

/// What a run did (also kept in `price_reprices`).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct RepriceOutcome {
    pub reprice_id: Uuid,
    /// RFC 3339, UTC.
    pub from: String,
    /// Exclusive; RFC 3339, UTC.
    pub to: String,
    /// LLM turns in the range that were looked at.
    pub turns_examined: i64,
    /// Turns whose estimate changed.
    pub turns_changed: i64,
    /// Change of the range's `cost_nanos` (the cost shown: reported, else estimated).
    pub cost_delta_nanos: i64,
    /// Change of the range's `cost_estimated_nanos`.
    pub cost_estimated_delta_nanos: i64,
    /// The transactions it took.
    pub transactions: i64,
}

/// One stored turn, as a run reads it.
#[derive(Debug, sqlx::FromRow)]
struct Turn {
    effective_at: DateTime<Utc>,
    event_id: Uuid,
    user_id: String,
    device_id: String,
    colony_id: String,
    session_id: String,
    model: String,
    runtime: String,
    data: sqlx::types::Json<serde_json::Map<String, serde_json::Value>>,
    cost_estimated_nanos: Option<i64>,
}

/// Re-prices `[from, to)` for the tenant with its entries `tenant` (see the module notes).
pub async fn run(
    pool: &PgPool,
    tenant_id: Uuid,
    tenant: &[PriceEntry],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<RepriceOutcome, ApiError> {
    let reprice_id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO price_reprices (tenant_id, reprice_id, range_from, range_to, tenant_price_ids,
            ingest_version) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(tenant_id)
    .bind(reprice_id)
    .bind(from)
    .bind(to)
    .bind(tenant.iter().map(|e| e.id.clone()).collect::<Vec<_>>())
    .bind(env!("CARGO_PKG_VERSION"))
    .execute(pool)
    .await?;
    let mut out = RepriceOutcome {
        reprice_id,
        from: from.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        to: to.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        ..RepriceOutcome::default()
    };
    let mut day = from.duration_trunc(Duration::days(1)).expect("in range");
    while day < to {
        let (lo, hi) = (from.max(day), to.min(day + Duration::days(1)));
        let mut after: Option<(DateTime<Utc>, Uuid)> = None;
        loop {
            let (n, last) = chunk(
                pool,
                tenant_id,
                reprice_id,
                tenant,
                (lo, hi),
                after,
                &mut out,
            )
            .await?;
            out.transactions += 1;
            if n < CHUNK {
                break;
            }
            after = last;
        }
        day += Duration::days(1);
    }
    sqlx::query(
        "UPDATE price_reprices SET finished_at = now() WHERE tenant_id = $1 AND reprice_id = $2",
    )
    .bind(tenant_id)
    .bind(reprice_id)
    .execute(pool)
    .await?;
    Ok(out)
}

/// One transaction: up to [`CHUNK`] turns of `[lo, hi)` after `after`. Returns how many it read and
/// the last one's position.
async fn chunk(
    pool: &PgPool,
    tenant_id: Uuid,
    reprice_id: Uuid,
    tenant: &[PriceEntry],
    (lo, hi): (DateTime<Utc>, DateTime<Utc>),
    after: Option<(DateTime<Utc>, Uuid)>,
    out: &mut RepriceOutcome,
) -> Result<(i64, Option<(DateTime<Utc>, Uuid)>), ApiError> {
    let mut tx = pool.begin().await?;
    let (after_at, after_id) = after.unwrap_or((lo - Duration::microseconds(1), Uuid::nil()));
    let turns: Vec<Turn> = sqlx::query_as(
        "SELECT effective_at, event_id, user_id, device_id, colony_id, session_id, model, runtime, data,
            cost_estimated_nanos
         FROM events
         WHERE tenant_id = $1 AND kind = 'llm.turn' AND effective_at >= $2 AND effective_at < $3
           AND (effective_at, event_id) > ($4, $5)
         ORDER BY effective_at, event_id LIMIT $6 FOR UPDATE",
    )
    .bind(tenant_id)
    .bind(lo)
    .bind(hi)
    .bind(after_at)
    .bind(after_id)
    .bind(CHUNK)
    .fetch_all(&mut *tx)
    .await?;
    let n = turns.len() as i64;
    let last = turns.last().map(|t| (t.effective_at, t.event_id));
    let mut deltas: BTreeMap<RollupKey, Usage> = BTreeMap::new();
    let (mut ids, mut times, mut estimates) = (vec![], vec![], vec![]);
    let (mut cost, mut estimated) = (0i128, 0i128);
    for t in &turns {
        // Stored turns passed the rule when they came in; one that no longer would is left alone.
        let Ok(base) = Usage::of_data(EventKind::LlmTurn, &t.data) else {
            continue;
        };
        let new = rollups::estimate_of(tenant, &t.model, t.effective_at, &base);
        if new == t.cost_estimated_nanos {
            continue;
        }
        let delta = base
            .with_estimate(new)
            .minus(&base.with_estimate(t.cost_estimated_nanos));
        cost += delta.cost_nanos;
        estimated += delta.cost_estimated_nanos;
        let key = RollupKey {
            bucket: bucket_of(t.effective_at),
            user_id: t.user_id.clone(),
            device_id: t.device_id.clone(),
            colony_id: t.colony_id.clone(),
            session_id: t.session_id.clone(),
            model: t.model.clone(),
            runtime: t.runtime.clone(),
        };
        deltas.entry(key).or_default().add(&delta);
        ids.push(t.event_id);
        times.push(t.effective_at);
        estimates.push(new);
    }
    let changed = ids.len() as i64;
    if changed > 0 {
        sqlx::query(
            "UPDATE events e SET cost_estimated_nanos = u.est
             FROM unnest($2::uuid[], $3::timestamptz[], $4::int8[]) AS u(id, at, est)
             WHERE e.tenant_id = $1 AND e.event_id = u.id AND e.effective_at = u.at",
        )
        .bind(tenant_id)
        .bind(&ids)
        .bind(&times)
        .bind(&estimates)
        .execute(&mut *tx)
        .await?;
        deltas.retain(|_, u| !u.is_zero());
        rollups::upsert(&mut tx, tenant_id, &deltas).await?;
    }
    sqlx::query(
        "UPDATE price_reprices SET turns_examined = turns_examined + $3, turns_changed = turns_changed + $4,
            cost_delta_nanos = cost_delta_nanos + $5::numeric,
            cost_estimated_delta_nanos = cost_estimated_delta_nanos + $6::numeric
         WHERE tenant_id = $1 AND reprice_id = $2",
    )
    .bind(tenant_id)
    .bind(reprice_id)
    .bind(n)
    .bind(changed)
    .bind(cost.to_string())
    .bind(estimated.to_string())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    out.turns_examined += n;
    out.turns_changed += changed;
    // The answer's sums saturate; the audit row's are exact (numeric).
    let clamp = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    out.cost_delta_nanos = out.cost_delta_nanos.saturating_add(clamp(cost));
    out.cost_estimated_delta_nanos = out
        .cost_estimated_delta_nanos
        .saturating_add(clamp(estimated));
    Ok((n, last))
}
