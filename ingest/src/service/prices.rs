//! Prices as the API and the command line manage them: a tenant's own entries, effective-dated, which
//! win over the shipped catalog for the turns they match (see [`apiary_schema::prices`]); the listing of
//! both; and the re-pricing of turns already stored ([`crate::store::reprice`]). An entry is never
//! edited: a correction is a new entry with a later `from` (or an `until` on the next).
//!
//! Each operation takes the pool and a typed input and answers a typed result or the one [`ApiError`];
//! authorization is the caller's. Bad input is a 400 (`invalid_price` naming the field,
//! `invalid_parameter` naming the parameter); nothing is stored.

use apiary_schema::prices::{self, PriceEntry, PriceSpec, TierSpec};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::ApiError;
use crate::store::reprice::RepriceOutcome;

/// A new tenant price entry. Rates are USD per million tokens as decimal strings; `input` is uncached
/// input (cache reads and writes are inside a turn's input tokens and priced at their own rates: a
/// missing `cache_read` or `cache_write_5m` is priced as input, a missing `cache_write_1h` as
/// `cache_write_5m`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewPrice {
    /// Model patterns (`*` matches any run of characters; ASCII case-insensitive), 1 to 32.
    pub models: Vec<String>,
    /// Start of the effective period (included): `YYYY-MM-DD` (midnight UTC) or RFC 3339.
    pub from: String,
    /// End of the effective period (excluded), same forms; absent = open.
    #[serde(default)]
    pub until: Option<String>,
    pub input: String,
    pub output: String,
    #[serde(default)]
    pub cache_read: Option<String>,
    #[serde(default)]
    pub cache_write_5m: Option<String>,
    #[serde(default)]
    pub cache_write_1h: Option<String>,
    /// Rates above an input size (e.g. long-context prices above 200k input tokens).
    #[serde(default)]
    pub tiers: Vec<TierSpec>,
    /// Where the prices come from (a contract, a provider page).
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
}

/// Whose entry a listed price is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PriceOwner {
    /// The tenant's own (wins over shipped entries).
    Tenant,
    /// The catalog shipped with Apiary.
    Shipped,
}

/// A price entry as stored, with its normalised rates and dates.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PriceItem {
    pub price_id: String,
    pub owner: PriceOwner,
    /// Lower-cased patterns.
    pub models: Vec<String>,
    /// RFC 3339, UTC.
    pub from: String,
    pub until: Option<String>,
    pub input: String,
    pub output: String,
    pub cache_read: Option<String>,
    pub cache_write_5m: Option<String>,
    pub cache_write_1h: Option<String>,
    pub tiers: Vec<TierSpec>,
    pub source: Option<String>,
    /// The date the shipped entry's prices were read.
    pub as_of: Option<String>,
    pub note: Option<String>,
}

/// `GET /v1/prices`: the tenant's entries (newest start first), then the shipped catalog's.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PriceList {
    pub prices: Vec<PriceItem>,
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

impl PriceItem {
    fn of(owner: PriceOwner, e: &PriceEntry, spec: Option<&PriceSpec>) -> PriceItem {
        let rate = |n: Option<i64>| n.map(prices::format_rate);
        PriceItem {
            price_id: e.id.clone(),
            owner,
            models: e.models.clone(),
            from: rfc3339(e.from),
            until: e.until.map(rfc3339),
            input: prices::format_rate(e.rates.input),
            output: prices::format_rate(e.rates.output),
            cache_read: rate(e.rates.cache_read),
            cache_write_5m: rate(e.rates.cache_write_5m),
            cache_write_1h: rate(e.rates.cache_write_1h),
            tiers: e
                .tiers
                .iter()
                .map(|t| TierSpec {
                    above_input_tokens: t.above_input_tokens,
                    input: prices::format_rate(t.rates.input),
                    output: prices::format_rate(t.rates.output),
                    cache_read: rate(t.rates.cache_read),
                    cache_write_5m: rate(t.rates.cache_write_5m),
                    cache_write_1h: rate(t.rates.cache_write_1h),
                })
                .collect(),
            source: spec.and_then(|s| s.source.clone()),
            as_of: spec.and_then(|s| s.as_of.clone()),
            note: spec.and_then(|s| s.note.clone()),
        }
    }
}

impl NewPrice {
    /// The shared spec of this request (what is stored).
    fn spec(self) -> PriceSpec {
        PriceSpec {
            id: None,
            models: self.models,
            from: self.from,
            until: self.until,
            input: self.input,
            output: self.output,
            cache_read: self.cache_read,
            cache_write_5m: self.cache_write_5m,
            cache_write_1h: self.cache_write_1h,
            tiers: self.tiers,
            source: self.source,
            as_of: None,
            note: self.note,
        }
    }
}

/// Longest `source` or `note` kept.
const MAX_TEXT: usize = 1000;

/// A 400 `invalid_price` with `message` (naming the field).
pub fn invalid(message: String) -> ApiError {
    ApiError::BadRequest {
        code: "invalid_price",
        message,
    }
}

/// Checks and stores a tenant entry under a new id (`tp_` + 32 hex digits); the API's and the command
/// line's one way in.
pub async fn add(pool: &PgPool, tenant_id: Uuid, asked: NewPrice) -> Result<PriceItem, ApiError> {
    for (field, text) in [("source", &asked.source), ("note", &asked.note)] {
        if text.as_ref().is_some_and(|t| t.chars().count() > MAX_TEXT) {
            return Err(invalid(format!("{field}: at most {MAX_TEXT} characters")));
        }
    }
    let spec = asked.spec();
    let id = format!("tp_{}", Uuid::new_v4().simple());
    let entry = spec.check(&id).map_err(|e| invalid(e.to_string()))?;
    if !crate::store::prices::insert(pool, tenant_id, &id, &spec).await? {
        return Err(invalid(format!(
            "the tenant already has {} price entries, the most it may keep",
            crate::store::prices::MAX_TENANT_PRICES
        )));
    }
    Ok(PriceItem::of(PriceOwner::Tenant, &entry, Some(&spec)))
}

/// The tenant's entries (newest start first), then the shipped catalog's.
pub async fn list(pool: &PgPool, tenant_id: Uuid) -> Result<PriceList, ApiError> {
    let mut conn = pool.acquire().await?;
    let mut tenant = crate::store::prices::tenant_specs(&mut conn, tenant_id).await?;
    tenant.sort_by(|a, b| (b.1.from, &a.1.id).cmp(&(a.1.from, &b.1.id)));
    let mut out: Vec<PriceItem> = tenant
        .iter()
        .map(|(spec, e)| PriceItem::of(PriceOwner::Tenant, e, Some(spec)))
        .collect();
    let file_specs = prices::catalog_specs();
    out.extend(prices::shipped().iter().map(|e| {
        let spec = file_specs.iter().find(|s| s.id.as_deref() == Some(&e.id));
        PriceItem::of(PriceOwner::Shipped, e, spec)
    }));
    Ok(PriceList { prices: out })
}

/// Longest range one request re-prices (split a longer one; each run is idempotent).
const MAX_REPRICE_DAYS: i64 = 400;

/// Checks the range and runs the re-pricing (the API's and the command line's one way in).
pub async fn reprice(
    pool: &PgPool,
    tenant_id: Uuid,
    from: &str,
    to: &str,
) -> Result<RepriceOutcome, ApiError> {
    let time = |name: &str, v: &str| {
        prices::parse_instant(v)
            .ok_or_else(|| ApiError::bad_param(name, "neither YYYY-MM-DD nor an RFC 3339 time"))
    };
    let (from, to) = (time("from", from)?, time("to", to)?);
    if to <= from {
        return Err(ApiError::bad_param("to", "must be after `from`"));
    }
    if to - from > chrono::Duration::days(MAX_REPRICE_DAYS) {
        return Err(ApiError::bad_param(
            "to",
            format!("at most {MAX_REPRICE_DAYS} days after `from`: split the range"),
        ));
    }
    let mut conn = pool.acquire().await?;
    let tenant = crate::store::prices::tenant_entries(&mut conn, tenant_id).await?;
    drop(conn);
    let outcome = crate::store::reprice::run(pool, tenant_id, &tenant, from, to).await?;
    tracing::info!(
        %tenant_id,
        reprice_id = %outcome.reprice_id,
        turns_changed = outcome.turns_changed,
        "re-priced"
    );
    Ok(outcome)
}
