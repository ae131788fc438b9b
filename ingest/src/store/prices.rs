//! A tenant's own prices (`tenant_prices`): each row the checked [`PriceSpec`] as JSON, keyed by its id.
//! Batches read them in their transaction (only when they hold an LLM turn with a model; a group reads
//! all its tenants' in one statement, [`entries_of`]), so an entry
//! committed before a batch starts prices that batch on every replica, with no cache to go stale.
//! Entries win over the shipped catalog ([`apiary_schema::prices::find`]).

use apiary_schema::prices::{PriceEntry, PriceSpec};
use std::collections::HashMap;

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// The tenant's entries, checked again (a row that no longer passes — it cannot, short of a hand edit —
/// is skipped with a warning rather than failing every batch).
pub async fn tenant_entries(
    conn: &mut PgConnection,
    tenant_id: Uuid,
) -> Result<Vec<PriceEntry>, sqlx::Error> {
    Ok(tenant_specs(conn, tenant_id)
        .await?
        .into_iter()
        .map(|(_, e)| e)
        .collect())
}

/// The entries of several tenants (a group's, [`super::batch`]) in one statement.
pub async fn entries_of(
    conn: &mut PgConnection,
    tenants: &[Uuid],
) -> Result<HashMap<Uuid, Vec<PriceEntry>>, sqlx::Error> {
    let mut out: HashMap<Uuid, Vec<PriceEntry>> = HashMap::new();
    match tenants {
        [] => return Ok(out),
        // `= $1`, not `= ANY($1)`: Citus routes it to the tenant's worker (a group there has one tenant).
        [one] => {
            out.insert(*one, tenant_entries(conn, *one).await?);
            return Ok(out);
        }
        _ => {}
    }
    let rows: Vec<(Uuid, String, sqlx::types::Json<PriceSpec>)> = sqlx::query_as(
        "SELECT tenant_id, price_id, spec FROM tenant_prices WHERE tenant_id = ANY($1)
         ORDER BY tenant_id, price_id",
    )
    .bind(tenants)
    .fetch_all(conn)
    .await?;
    for (tenant_id, id, spec) in rows {
        if let Some(e) = checked(tenant_id, id, &spec.0) {
            out.entry(tenant_id).or_default().push(e);
        }
    }
    Ok(out)
}

/// A stored entry checked again, or None (with a warning) when it no longer passes.
fn checked(tenant_id: Uuid, id: String, spec: &PriceSpec) -> Option<PriceEntry> {
    match spec.check(&id) {
        Ok(e) => Some(PriceEntry { id, ..e }),
        Err(e) => {
            tracing::warn!(%tenant_id, price_id = %id, error = %e, "stored price entry skipped");
            None
        }
    }
}

/// The tenant's entries with the specs they were stored as, by id.
pub async fn tenant_specs(
    conn: &mut PgConnection,
    tenant_id: Uuid,
) -> Result<Vec<(PriceSpec, PriceEntry)>, sqlx::Error> {
    let rows: Vec<(String, sqlx::types::Json<PriceSpec>)> = sqlx::query_as(
        "SELECT price_id, spec FROM tenant_prices WHERE tenant_id = $1 ORDER BY price_id",
    )
    .bind(tenant_id)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, spec)| Some((spec.0.clone(), checked(tenant_id, id, &spec.0)?)))
        .collect())
}

/// A tenant keeps at most this many entries: every batch with an LLM turn reads them all.
pub const MAX_TENANT_PRICES: i64 = 1000;

/// Stores a checked entry under `price_id`; false (nothing stored) when the tenant already has
/// [`MAX_TENANT_PRICES`] entries (two concurrent adds at the limit may both pass: the bound is for cost,
/// not an exact quota).
pub async fn insert(
    pool: &PgPool,
    tenant_id: Uuid,
    price_id: &str,
    spec: &PriceSpec,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO tenant_prices (tenant_id, price_id, spec)
         SELECT $1, $2, $3
         WHERE (SELECT count(*) FROM tenant_prices WHERE tenant_id = $1) < $4",
    )
    .bind(tenant_id)
    .bind(price_id)
    .bind(sqlx::types::Json(spec))
    .bind(MAX_TENANT_PRICES)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}
