//! Model prices: the shipped catalog (`shared-schema/prices/catalog.toml`), tenants' own entries, and the
//! one pure lookup that turns a turn's tokens into an *estimated* cost ([`estimate`]).
//!
//! ## Money is integers
//! A rate is integer nano-USD per million tokens ([`Nanos`] per MTok), read from a decimal string
//! ("3.00", "0.025": at most 9 decimals, never through a float). A turn's cost is
//! `Σ tokens × rate / 10^6`, summed in `i128` and rounded half up to a whole nano-USD once per turn.
//!
//! ## Token semantics (as docs/usage.md states them)
//! `input` counts every prompt token, cache reads and cache writes **included**; so the uncached input is
//! `input − cache_read − cache_write_5m − cache_write_1h` (0 when a producer reports more cached than
//! input). A missing cache rate falls back: `cache_read` → `input`, `cache_write_5m` → `input`,
//! `cache_write_1h` → `cache_write_5m`.
//!
//! ## Tiers
//! An entry may carry tiers (e.g. long-context prices): a turn whose `input` (cache included) is above a
//! tier's `above_input_tokens` is priced wholly at the highest such tier's rates, as providers bill a
//! request. Hive's turn may sum several requests, so a tier is applied per turn: an approximation.
//!
//! ## Precedence ([`find`])
//! An entry applies to a turn when one of its patterns matches the model (ASCII case-insensitive, `*` any
//! run of characters) and `from ≤ turn time < until`. A tenant's applicable entries win over the shipped
//! ones; among the same owner's, the newest `from` wins; then the longer (more specific) pattern; then
//! the smaller id — so the choice never depends on the order entries were stored in.

use std::sync::OnceLock;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

/// The shipped catalog's text (embedded at build time).
pub const CATALOG_TOML: &str = include_str!("../prices/catalog.toml");

/// Integer nano-USD (10^-9 USD).
pub type Nanos = i64;

/// Largest rate accepted: 1,000,000 USD per million tokens (in nano-USD per MTok).
pub const MAX_RATE_NANOS: Nanos = 1_000_000 * 1_000_000_000;

/// Largest estimate kept for one turn (the ingest's bound on one event's cost, 10^6 USD); a bigger one is
/// no estimate at all.
pub const MAX_ESTIMATE_NANOS: Nanos = 1_000_000 * 1_000_000_000;

/// One price in the form it is written (catalog file, `POST /v1/prices`): decimal strings, dates as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceSpec {
    /// Stable name (the shipped catalog's; a tenant entry gets one from the ingest when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Model patterns: `*` matches any run of characters; compared ASCII case-insensitively.
    pub models: Vec<String>,
    /// Start of the effective period: `YYYY-MM-DD` (midnight UTC) or an RFC 3339 time.
    pub from: String,
    /// End of the effective period, excluded (same forms); absent = open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// USD per million tokens of uncached input (a decimal string, like every rate).
    pub input: String,
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_5m: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h: Option<String>,
    /// Rates above an input size, replacing the base rates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierSpec>,
    /// Where the prices were read (a URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// When they were read (`YYYY-MM-DD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A tier as written: its rates replace the entry's for turns above `above_input_tokens`. Rates in USD
/// per million tokens, as decimal strings ("3.00", "0.025"; at most 9 decimals).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TierSpec {
    /// The tier's rates apply to turns whose input tokens (cache included) are above this.
    pub above_input_tokens: u64,
    pub input: String,
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_5m: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h: Option<String>,
}

/// Rates as decimal strings (borrowed from a [`PriceSpec`] or a [`TierSpec`]).
struct RateSpec<'a> {
    input: &'a str,
    output: &'a str,
    cache_read: Option<&'a str>,
    cache_write_5m: Option<&'a str>,
    cache_write_1h: Option<&'a str>,
}

/// Rates in nano-USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    pub input: Nanos,
    pub output: Nanos,
    pub cache_read: Option<Nanos>,
    pub cache_write_5m: Option<Nanos>,
    pub cache_write_1h: Option<Nanos>,
}

/// A tier: `rates` for turns whose input is above `above_input_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tier {
    pub above_input_tokens: u64,
    pub rates: Rates,
}

/// A checked price entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceEntry {
    pub id: String,
    /// Lower-cased patterns.
    pub models: Vec<String>,
    pub from: DateTime<Utc>,
    pub until: Option<DateTime<Utc>>,
    pub rates: Rates,
    /// Sorted by `above_input_tokens`, distinct.
    pub tiers: Vec<Tier>,
}

/// A turn's tokens, in the documented semantics (cache reads and writes inside `input`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnTokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write_5m: u64,
    pub cache_write_1h: u64,
}

/// Why a price entry was refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    #[error("{field}: {why}")]
    Field { field: String, why: String },
}

fn bad(field: impl Into<String>, why: impl Into<String>) -> PriceError {
    PriceError::Field {
        field: field.into(),
        why: why.into(),
    }
}

/// USD per million tokens, a decimal string, → nano-USD per million tokens. Exact: at most 9 decimals,
/// no sign, no exponent, at most [`MAX_RATE_NANOS`].
pub fn parse_rate(text: &str) -> Result<Nanos, String> {
    let t = text.trim();
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || (t.contains('.') && frac.is_empty()) {
        return Err(format!(
            "{text:?} is not a decimal number of USD per million tokens (like \"3.00\")"
        ));
    }
    if frac.len() > 9 {
        return Err(format!("{text:?} has more than 9 decimals"));
    }
    let too_big = || format!("{text:?} is above 1000000 USD per million tokens");
    let whole: i64 = int.parse().map_err(|_| too_big())?;
    let frac_nanos: i64 = format!("{frac:0<9}").parse().unwrap_or(0);
    let n = whole
        .checked_mul(1_000_000_000)
        .and_then(|w| w.checked_add(frac_nanos))
        .ok_or_else(too_big)?;
    if n > MAX_RATE_NANOS {
        return Err(too_big());
    }
    Ok(n)
}

/// Nano-USD per million tokens → the decimal string it was read from (trailing zeros trimmed to 2).
pub fn format_rate(n: Nanos) -> String {
    let s = format!("{}.{:09}", n / 1_000_000_000, n % 1_000_000_000);
    let trimmed = s.trim_end_matches('0');
    let decimals = trimmed.split_once('.').map_or(0, |(_, f)| f.len());
    if decimals < 2 {
        format!("{}{}", trimmed, "0".repeat(2 - decimals))
    } else {
        trimmed.to_string()
    }
}

/// `YYYY-MM-DD` (midnight UTC) or an RFC 3339 time.
pub fn parse_instant(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Some(d.and_hms_opt(0, 0, 0)?.and_utc());
    }
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

impl RateSpec<'_> {
    fn check(&self, at: &str) -> Result<Rates, PriceError> {
        let one =
            |name: &str, v: &str| parse_rate(v).map_err(|why| bad(format!("{at}{name}"), why));
        let opt = |name: &str, v: Option<&str>| v.map(|v| one(name, v)).transpose();
        Ok(Rates {
            input: one("input", self.input)?,
            output: one("output", self.output)?,
            cache_read: opt("cache_read", self.cache_read)?,
            cache_write_5m: opt("cache_write_5m", self.cache_write_5m)?,
            cache_write_1h: opt("cache_write_1h", self.cache_write_1h)?,
        })
    }
}

/// Longest pattern, and most patterns, an entry may have.
const MAX_PATTERN_LEN: usize = 200;
const MAX_PATTERNS: usize = 32;
const MAX_TIERS: usize = 8;

impl PriceSpec {
    /// Checks the spec; `id` names the entry when the spec has none.
    pub fn check(&self, id: &str) -> Result<PriceEntry, PriceError> {
        if self.models.is_empty() || self.models.len() > MAX_PATTERNS {
            return Err(bad("models", format!("1 to {MAX_PATTERNS} patterns")));
        }
        let mut models = Vec::with_capacity(self.models.len());
        for m in &self.models {
            let m = m.trim();
            if m.is_empty() || m.len() > MAX_PATTERN_LEN || m.chars().any(char::is_control) {
                return Err(bad(
                    "models",
                    format!("a pattern is 1 to {MAX_PATTERN_LEN} printable characters"),
                ));
            }
            if m.chars().all(|c| c == '*') {
                return Err(bad(
                    "models",
                    "a pattern of only `*` would price every model",
                ));
            }
            models.push(m.to_ascii_lowercase());
        }
        let when = |field: &str, v: &str| {
            parse_instant(v).ok_or_else(|| {
                bad(
                    field,
                    format!("{v:?} is neither YYYY-MM-DD nor an RFC 3339 time"),
                )
            })
        };
        let from = when("from", &self.from)?;
        let until = self
            .until
            .as_deref()
            .map(|u| when("until", u))
            .transpose()?;
        if until.is_some_and(|u| u <= from) {
            return Err(bad("until", "must be after `from`"));
        }
        if self.tiers.len() > MAX_TIERS {
            return Err(bad("tiers", format!("at most {MAX_TIERS}")));
        }
        let mut tiers = Vec::with_capacity(self.tiers.len());
        for (i, t) in self.tiers.iter().enumerate() {
            tiers.push(Tier {
                above_input_tokens: t.above_input_tokens,
                rates: RateSpec {
                    input: &t.input,
                    output: &t.output,
                    cache_read: t.cache_read.as_deref(),
                    cache_write_5m: t.cache_write_5m.as_deref(),
                    cache_write_1h: t.cache_write_1h.as_deref(),
                }
                .check(&format!("tiers[{i}]."))?,
            });
        }
        tiers.sort_by_key(|t| t.above_input_tokens);
        if tiers
            .windows(2)
            .any(|w| w[0].above_input_tokens == w[1].above_input_tokens)
        {
            return Err(bad("tiers", "two tiers start above the same input size"));
        }
        Ok(PriceEntry {
            id: self.id.clone().unwrap_or_else(|| id.to_string()),
            models,
            from,
            until,
            rates: RateSpec {
                input: &self.input,
                output: &self.output,
                cache_read: self.cache_read.as_deref(),
                cache_write_5m: self.cache_write_5m.as_deref(),
                cache_write_1h: self.cache_write_1h.as_deref(),
            }
            .check("")?,
            tiers,
        })
    }
}

/// The catalog file's shape.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    price: Vec<PriceSpec>,
}

/// Parses a catalog file: every entry checked, ids present and unique.
pub fn parse_catalog(text: &str) -> Result<Vec<PriceEntry>, String> {
    let file: CatalogFile = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut out: Vec<PriceEntry> = Vec::with_capacity(file.price.len());
    for (i, spec) in file.price.iter().enumerate() {
        let Some(id) = spec.id.as_deref() else {
            return Err(format!("price[{i}]: id is missing"));
        };
        if out.iter().any(|e| e.id == id) {
            return Err(format!("price[{i}]: id {id:?} is used twice"));
        }
        out.push(spec.check(id).map_err(|e| format!("{id}: {e}"))?);
    }
    Ok(out)
}

/// The shipped catalog's entries as written (for their `source`, `as_of` and `note`).
pub fn catalog_specs() -> &'static [PriceSpec] {
    static SPECS: OnceLock<Vec<PriceSpec>> = OnceLock::new();
    SPECS.get_or_init(|| {
        toml::from_str::<CatalogFile>(CATALOG_TOML)
            .map(|f| f.price)
            .expect("the shipped price catalog is valid")
    })
}

/// The shipped catalog, parsed once. The file is embedded and checked by a unit test, so a bad file
/// never ships; should it anyway, it panics at first use rather than price wrongly.
pub fn shipped() -> &'static [PriceEntry] {
    static CATALOG: OnceLock<Vec<PriceEntry>> = OnceLock::new();
    CATALOG.get_or_init(|| parse_catalog(CATALOG_TOML).expect("the shipped price catalog is valid"))
}

/// Whether `pattern` (lower case; `*` any run) matches all of `model` (compared lower-cased).
pub fn pattern_matches(pattern: &str, model: &str) -> bool {
    let (p, m) = (pattern.as_bytes(), model.as_bytes());
    // Iterative glob with backtracking to the last `*`: linear in practice, never exponential.
    let (mut pi, mut mi) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while mi < m.len() {
        if pi < p.len() && p[pi] != b'*' && p[pi] == m[mi].to_ascii_lowercase() {
            pi += 1;
            mi += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, mi));
            pi += 1;
        } else if let Some((sp, sm)) = star {
            pi = sp + 1;
            mi = sm + 1;
            star = Some((sp, sm + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

impl PriceEntry {
    /// Whether the entry prices `model` at `at`; the length of the longest matching pattern if so.
    fn applies(&self, model: &str, at: DateTime<Utc>) -> Option<usize> {
        if at < self.from || self.until.is_some_and(|u| at >= u) {
            return None;
        }
        self.models
            .iter()
            .filter(|p| pattern_matches(p, model))
            .map(String::len)
            .max()
    }

    /// The rates for a turn of `input` tokens: the highest tier below it, else the base rates.
    pub fn rates_for(&self, input: u64) -> &Rates {
        self.tiers
            .iter()
            .rev()
            .find(|t| input > t.above_input_tokens)
            .map_or(&self.rates, |t| &t.rates)
    }

    /// The cost of a turn at this entry's rates, in nano-USD; None above [`MAX_ESTIMATE_NANOS`].
    pub fn cost(&self, t: &TurnTokens) -> Option<Nanos> {
        let r = self.rates_for(t.input);
        let cached =
            u128::from(t.cache_read) + u128::from(t.cache_write_5m) + u128::from(t.cache_write_1h);
        let uncached = u128::from(t.input).saturating_sub(cached);
        let write_5m = r.cache_write_5m.unwrap_or(r.input);
        let parts = [
            (uncached, r.input),
            (u128::from(t.output), r.output),
            (u128::from(t.cache_read), r.cache_read.unwrap_or(r.input)),
            (u128::from(t.cache_write_5m), write_5m),
            (
                u128::from(t.cache_write_1h),
                r.cache_write_1h.unwrap_or(write_5m),
            ),
        ];
        // Each product ≤ 2^64 × 10^15 < 2^114: the sum of five cannot overflow u128.
        let micro: u128 = parts.iter().map(|(n, rate)| n * (*rate as u128)).sum();
        let nanos = (micro + 500_000) / 1_000_000;
        i64::try_from(nanos)
            .ok()
            .filter(|n| *n <= MAX_ESTIMATE_NANOS)
    }
}

/// The entry that prices `model` at `at` (see the module notes for precedence), if any.
pub fn find<'a>(
    tenant: &'a [PriceEntry],
    shipped: &'a [PriceEntry],
    model: &str,
    at: DateTime<Utc>,
) -> Option<&'a PriceEntry> {
    if model.is_empty() {
        return None;
    }
    best(tenant, model, at).or_else(|| best(shipped, model, at))
}

fn best<'a>(entries: &'a [PriceEntry], model: &str, at: DateTime<Utc>) -> Option<&'a PriceEntry> {
    entries
        .iter()
        .filter_map(|e| e.applies(model, at).map(|len| (e, len)))
        .max_by(|(a, alen), (b, blen)| {
            (a.from, alen)
                .cmp(&(b.from, blen))
                .then_with(|| b.id.cmp(&a.id))
        })
        .map(|(e, _)| e)
}

/// A turn's estimated cost in nano-USD: the price [`find`] picks, applied to `tokens`; None when no
/// entry prices the model at that time (or the estimate is out of range).
pub fn estimate(
    tenant: &[PriceEntry],
    shipped: &[PriceEntry],
    model: &str,
    at: DateTime<Utc>,
    tokens: &TurnTokens,
) -> Option<Nanos> {
    find(tenant, shipped, model, at)?.cost(tokens)
}

#[cfg(test)]
mod tests;
