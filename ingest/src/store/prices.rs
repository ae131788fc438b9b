//! A tenant's own prices (`tenant_prices`): each row the checked [`PriceSpec`] as JSON, keyed by its id.
//! Batches read them in their transaction (only when they hold an LLM turn with a model), so an entry
//! committed before a batch starts prices that batch on every replica, with no cache to go stale.
//! Entries win over the shipped catalog ([`apiary_schema::prices::find`]).

use apiary_schema::prices::{PriceEntry, PriceSpec};
use sqlx::PgConnection;
use uuid::Uuid;

/// The tenant's entries, checked again (a row that no longer passes — it cannot, short of a hand edit —
/// is skipped with a warning rather than failing every batch).
pub async fn tenant_entries(
    conn: &mut PgConnection,
    tenant_id: Uuid,
) -> Result<Vec<PriceEntry>, sqlx::Error> {
    let rows: Vec<(String, sqlx::types::Json<PriceSpec>)> = sqlx::query_as(
        "SELECT price_id, spec FROM tenant_prices WHERE tenant_id = $1 ORDER BY price_id",
    )
    .bind(tenant_id)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, spec)| match spec.0.check(&id) {
            Ok(e) => Some(PriceEntry { id, ..e }),
            Err(e) => {
                tracing::warn!(%tenant_id, price_id = %id, error = %e, "stored price entry skipped");
                None
            }
        })
        .collect())
}
