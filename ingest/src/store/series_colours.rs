//! Series colours (`series_colours`): the colour slot each series key of a tenant's charts keeps, per
//! dimension (model, user, colony). The dashboard picks a new key's slot the first time a chart draws it
//! ([`crate::dashboard::chart::assign`]) and stores it here; a stored slot never changes, so a series has
//! one colour on every chart, range, granularity and page. Concurrent first draws on two replicas may pick
//! the same slot for two keys: `ON CONFLICT DO NOTHING` keeps one slot per key and the page resolves what
//! it shows (two keys of one page never share a colour while there are at most twelve).

use std::collections::BTreeMap;

use sqlx::PgPool;
use uuid::Uuid;

/// The stored slots of `keys` (those that have one).
pub async fn stored(
    pool: &PgPool,
    tenant_id: Uuid,
    dimension: &str,
    keys: &[String],
) -> Result<BTreeMap<String, usize>, sqlx::Error> {
    let rows: Vec<(String, i16)> = sqlx::query_as(
        "SELECT series_key, slot FROM series_colours
         WHERE tenant_id = $1 AND dimension = $2 AND series_key = ANY($3)",
    )
    .bind(tenant_id)
    .bind(dimension)
    .bind(keys)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(k, s)| (k, usize::try_from(s).unwrap_or(0)))
        .collect())
}

/// How many keys of the dimension hold each slot (slots no key holds are absent).
pub async fn slot_counts(
    pool: &PgPool,
    tenant_id: Uuid,
    dimension: &str,
) -> Result<BTreeMap<usize, u64>, sqlx::Error> {
    let rows: Vec<(i16, i64)> = sqlx::query_as(
        "SELECT slot, count(*) FROM series_colours
         WHERE tenant_id = $1 AND dimension = $2 GROUP BY slot",
    )
    .bind(tenant_id)
    .bind(dimension)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(s, n)| {
            (
                usize::try_from(s).unwrap_or(0),
                u64::try_from(n).unwrap_or(0),
            )
        })
        .collect())
}

/// Stores the slots of new keys; a key that already has one keeps it.
pub async fn insert(
    pool: &PgPool,
    tenant_id: Uuid,
    dimension: &str,
    slots: &[(String, usize)],
) -> Result<(), sqlx::Error> {
    if slots.is_empty() {
        return Ok(());
    }
    let keys: Vec<&str> = slots.iter().map(|(k, _)| k.as_str()).collect();
    let values: Vec<i16> = slots
        .iter()
        .map(|(_, s)| i16::try_from(*s).unwrap_or(0))
        .collect();
    sqlx::query(
        "INSERT INTO series_colours (tenant_id, dimension, series_key, slot)
         SELECT $1, $2, k, s FROM unnest($3::text[], $4::smallint[]) AS t (k, s)
         ON CONFLICT DO NOTHING",
    )
    .bind(tenant_id)
    .bind(dimension)
    .bind(&keys)
    .bind(&values)
    .execute(pool)
    .await?;
    Ok(())
}
