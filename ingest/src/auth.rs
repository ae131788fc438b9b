//! Bearer tokens: creation, verification, scopes, and the per-token rate limit.
//!
//! Two kinds of token, in two tables, told apart by their prefix:
//! - **Tenant tokens** (`apy_` + 64 hex characters, `api_tokens`): bound to one tenant, one or more
//!   scopes (`ingest`, `read`, `admin`; `admin` implies `read`), and optionally a user and a device. They
//!   resolve to a [`Principal`]. `admin` is an administrator *of its tenant*: no scope of a tenant token
//!   reaches another tenant's rows. A token bound to a user reads only that user's data
//!   ([`Principal::read_user`]: usage rows, sessions, colonies, devices — another user's session answers
//!   404 like an unknown one); `admin` tokens and tokens bound to no user read the whole tenant.
//! - **Operator tokens** (`apo_` + 64 hex characters, `operator_tokens`): made only by `apiary-ingest
//!   operator-token create`, bound to no tenant; they resolve to an [`Operator`], whose one read is usage
//!   per tenant (see [`crate::access`]). Every other route refuses them (403).
//!
//! Only a token's SHA-256 is stored, so a database dump reveals no usable token; no salt is needed for a
//! random secret of 256 bits. Verified tokens are cached in memory for `token_cache_secs` (revocation,
//! `apiary-ingest token revoke`, takes effect within that time). The rate limit is a token bucket per
//! token, per replica.
//!
//! Both live in [`TokenGuard`], on maintained crates: the cache is a `moka` cache (time to live
//! `token_cache_secs`, at most [`MAX_ENTRIES`] tokens, the least useful evicted past that: an evicted
//! token only costs one more lookup), the buckets a `governor` keyed limiter (GCRA, the same arithmetic
//! as a token bucket: `rate_limit_burst` requests at once, one more every `1 / rate_limit_per_sec`
//! seconds; a refused request spends nothing and learns how long until the next one fits, which the API
//! answers as `Retry-After`). The limiter is keyed by verified tokens only, so its keys are bounded by the
//! tokens issued; past [`MAX_ENTRIES`] keys it drops those whose bucket is full again (indistinguishable
//! from a fresh one), which forgives nothing.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use apiary_schema::colony::ColonyNames;
use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use moka::sync::Cache;
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth_guard::AuthGuard;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Ingest,
    Read,
    Admin,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "ingest" => Some(Scope::Ingest),
            "read" => Some(Scope::Read),
            "admin" => Some(Scope::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Ingest => "ingest",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }
}

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Principal {
    pub tenant_id: Uuid,
    pub scopes: Vec<Scope>,
    /// The user the token is bound to: batches may not claim another.
    pub user_id: Option<String>,
    /// The device the token is bound to: batches may not claim another.
    pub device_id: Option<String>,
    /// The tenant's choice for colony names, read with the token (so it follows a change within
    /// `token_cache_secs`): a `keys` tenant's batches lose any colony name before it is stored.
    pub colony_names: ColonyNames,
    /// Key of the rate-limit bucket.
    token_hash: [u8; 32],
}

impl Principal {
    /// Someone at the command line acting for one tenant (`import`): ingest scope, no bindings, so a
    /// tenant-wide trusted sender.
    pub fn command_line(tenant_id: Uuid) -> Principal {
        Principal {
            tenant_id,
            scopes: vec![Scope::Ingest],
            user_id: None,
            device_id: None,
            colony_names: ColonyNames::Keys,
            token_hash: [0; 32],
        }
    }

    /// A device's trusted import (`import` of a bundle sealed by its registered key, or vouched for
    /// with `--trust-unsigned --as-user U --device D`): ingest scope, bound to the device and its user,
    /// so its events are judged exactly as that device's token's would be.
    pub fn device_import(tenant_id: Uuid, user_id: Option<String>, device_id: String) -> Principal {
        Principal {
            tenant_id,
            scopes: vec![Scope::Ingest],
            user_id,
            device_id: Some(device_id),
            colony_names: ColonyNames::Keys,
            token_hash: [0; 32],
        }
    }

    /// The hash of the token this caller came with: whose share of the batches in flight a batch is
    /// (`crate::cadence`), as it keys the rate limit.
    pub fn token_key(&self) -> &[u8; 32] {
        &self.token_hash
    }

    /// Has the scope (admin implies read).
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
            || (scope == Scope::Read && self.scopes.contains(&Scope::Admin))
    }

    /// The user whose data alone this token may read: a token bound to a user and without `admin`
    /// reads only that user's usage, sessions and devices; `admin` and unbound tokens read the whole
    /// tenant.
    pub fn read_user(&self) -> Option<&str> {
        if self.scopes.contains(&Scope::Admin) {
            None
        } else {
            self.user_id.as_deref()
        }
    }

    /// 403 unless the token has the scope.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.has(scope) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "this token lacks the `{}` scope",
                scope.as_str()
            )))
        }
    }
}

/// The holder of an operator token (see the module notes). Only [`TokenGuard::verify`] makes one.
#[derive(Debug, Clone)]
pub struct Operator {
    /// The id `operator-token create` reported, for logs.
    pub token_id: Uuid,
    /// Key of the rate-limit bucket.
    token_hash: [u8; 32],
}

/// Whoever presented a valid token.
#[derive(Debug, Clone)]
pub enum Caller {
    Tenant(Principal),
    Operator(Operator),
}

impl Caller {
    fn token_hash(&self) -> &[u8; 32] {
        match self {
            Caller::Tenant(p) => &p.token_hash,
            Caller::Operator(o) => &o.token_hash,
        }
    }
}

/// Prefix of tenant tokens.
pub const TENANT_TOKEN_PREFIX: &str = "apy_";
/// Prefix of operator tokens.
pub const OPERATOR_TOKEN_PREFIX: &str = "apo_";

/// What an operator token may do, said when it is used anywhere else.
pub const OPERATOR_ONLY: &str =
    "an operator token reads only GET /v1/usage grouped by tenant; use a tenant's token here";

/// A fresh random tenant token (shown once, never stored).
pub fn generate_token() -> String {
    random_token(TENANT_TOKEN_PREFIX)
}

/// A fresh random operator token (shown once, never stored).
pub fn generate_operator_token() -> String {
    random_token(OPERATOR_TOKEN_PREFIX)
}

fn random_token(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", hex::encode(bytes))
}

/// The stored form of a token.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Verified tokens and rate-limit buckets, in memory (see the module notes).
pub struct TokenGuard {
    /// Callers by token hash, each kept `token_cache_secs` after its lookup, so a busy token costs one
    /// database round trip per that time and a revocation takes effect within it.
    cache: Cache<[u8; 32], Caller>,
    /// One bucket per verified token hash: the per-token rate limit.
    buckets: DefaultKeyedRateLimiter<[u8; 32]>,
}

impl std::fmt::Debug for TokenGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenGuard")
            .field("cached", &self.cache.entry_count())
            .field("buckets", &self.buckets.len())
            .finish()
    }
}

/// Most tokens cached, and the key count past which full buckets are dropped.
const MAX_ENTRIES: u64 = 100_000;

/// tenant, scopes, user, device, the tenant's colony names
type TokenRow = (Uuid, Vec<String>, Option<String>, Option<String>, String);

impl TokenGuard {
    /// `rate_per_sec > 0` and `burst >= 1` (checked with the settings); a fractional burst rounds down.
    pub fn new(cache_for: Duration, rate_per_sec: f64, burst: f64) -> TokenGuard {
        // One request comes back every `period`; at least a nanosecond, the limiter's resolution.
        let period = Duration::try_from_secs_f64(rate_per_sec.recip())
            .unwrap_or(Duration::MAX)
            .max(Duration::from_nanos(1));
        let burst = NonZeroU32::new(burst.clamp(1.0, f64::from(u32::MAX)) as u32)
            .unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(period)
            .expect("the period is at least 1 ns")
            .allow_burst(burst);
        TokenGuard {
            cache: Cache::builder()
                .max_capacity(MAX_ENTRIES)
                .time_to_live(cache_for)
                .build(),
            buckets: RateLimiter::keyed(quota),
        }
    }

    /// Resolves a bearer token to its caller (401 when unknown or revoked). The prefix says which table
    /// holds it; a token with neither prefix is unknown without a database round-trip.
    pub async fn verify(&self, pool: &PgPool, token: &str) -> Result<Caller, ApiError> {
        let hash = hash_token(token);
        if let Some(c) = self.cache.get(&hash) {
            return Ok(c);
        }
        let caller = if token.starts_with(OPERATOR_TOKEN_PREFIX) {
            let id: Option<Uuid> = sqlx::query_scalar(
                "SELECT token_id FROM operator_tokens WHERE token_hash = $1 AND revoked_at IS NULL",
            )
            .bind(&hash[..])
            .fetch_optional(pool)
            .await?;
            Caller::Operator(Operator {
                token_id: id.ok_or(ApiError::Unauthenticated)?,
                token_hash: hash,
            })
        } else if token.starts_with(TENANT_TOKEN_PREFIX) {
            let row: Option<TokenRow> = sqlx::query_as(
                "SELECT k.tenant_id, k.scopes, k.user_id, k.device_id, t.colony_names \
                 FROM api_tokens k JOIN tenants t ON t.tenant_id = k.tenant_id \
                 WHERE k.token_hash = $1 AND k.revoked_at IS NULL",
            )
            .bind(&hash[..])
            .fetch_optional(pool)
            .await?;
            let (tenant_id, scopes, user_id, device_id, names) =
                row.ok_or(ApiError::Unauthenticated)?;
            Caller::Tenant(Principal {
                tenant_id,
                scopes: scopes.iter().filter_map(|s| Scope::parse(s)).collect(),
                user_id,
                device_id,
                colony_names: ColonyNames::parse(&names).unwrap_or_default(),
                token_hash: hash,
            })
        } else {
            return Err(ApiError::Unauthenticated);
        };
        self.cache.insert(hash, caller.clone());
        Ok(caller)
    }

    /// Takes one request from the token's bucket; Err(wait) when it is empty.
    pub fn admit(&self, caller: &Caller) -> Result<(), Duration> {
        self.admit_key(caller.token_hash())
    }

    fn admit_key(&self, key: &[u8; 32]) -> Result<(), Duration> {
        if self.buckets.len() >= MAX_ENTRIES as usize {
            self.buckets.retain_recent();
        }
        self.buckets
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(self.buckets.clock().now()))
    }
}

/// What authenticating a request needs from the application state (see [`crate::state`]).
#[derive(Clone)]
pub struct AuthState {
    /// Where tokens are looked up.
    pub pool: PgPool,
    /// Verified-token cache and per-token rate limits.
    pub tokens: Arc<TokenGuard>,
    /// Failed-authentication throttle per client address.
    pub guard: Arc<AuthGuard>,
    /// Counts the requests answered 429.
    pub metrics: Arc<Metrics>,
}

/// Any valid token, rate-limited. Routes take a [`Principal`] (tenant tokens only) or one of the read
/// scopes of [`crate::access`], which are built from this.
impl<S> FromRequestParts<S> for Caller
where
    AuthState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let auth = AuthState::from_ref(state);
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or(ApiError::Unauthenticated)?;
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty() && t.len() <= 200)
            .ok_or(ApiError::Unauthenticated)?;
        auth.authenticate(peer_ip(parts), token).await
    }
}

/// The request's TCP peer address, when it has one (not in in-process tests calling the router).
pub fn peer_ip(parts: &Parts) -> Option<std::net::IpAddr> {
    parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

impl AuthState {
    /// Resolves a token presented by the client at `ip` to its caller: the failed-authentication
    /// throttle, the verification (cached), then the token's rate limit. The bearer header and the
    /// dashboard's sign-in cookie ([`crate::dashboard`]) both go through here.
    pub async fn authenticate(
        &self,
        ip: Option<std::net::IpAddr>,
        token: &str,
    ) -> Result<Caller, ApiError> {
        let lookup = self.tokens.verify(&self.pool, token);
        let caller = self.guard.verify(ip, hash_token(token), lookup).await?;
        self.tokens.admit(&caller).map_err(|wait| {
            self.metrics.rate_limited.inc();
            ApiError::RateLimited(wait)
        })?;
        Ok(caller)
    }
}

/// A tenant token; an operator token is refused (403).
impl<S> FromRequestParts<S> for Principal
where
    AuthState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Caller::from_request_parts(parts, state).await? {
            Caller::Tenant(p) => Ok(p),
            Caller::Operator(_) => Err(ApiError::Forbidden(OPERATOR_ONLY.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_hash_stably() {
        let a = generate_token();
        assert!(a.starts_with("apy_") && a.len() == 68);
        assert_ne!(a, generate_token());
        assert_eq!(hash_token(&a), hash_token(&a));
        let o = generate_operator_token();
        assert!(o.starts_with("apo_") && o.len() == 68);
    }

    #[test]
    fn bucket_refuses_past_the_burst_and_refills_over_time() {
        let guard = TokenGuard::new(Duration::from_secs(1), 10.0, 2.0);
        let key = [7u8; 32];
        assert!(guard.admit_key(&key).is_ok());
        assert!(guard.admit_key(&key).is_ok());
        let wait = guard.admit_key(&key).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        assert!(
            guard.admit_key(&[8u8; 32]).is_ok(),
            "another token is apart"
        );
        std::thread::sleep(Duration::from_millis(150));
        assert!(guard.admit_key(&key).is_ok());
    }

    #[test]
    fn the_guards_debug_form_shows_counts_and_no_token() {
        let guard = TokenGuard::new(Duration::from_secs(30), 10.0, 2.0);
        guard.admit_key(&hash_token("apy_secret")).unwrap();
        assert_eq!(format!("{guard:?}"), "TokenGuard { cached: 0, buckets: 1 }");
    }

    #[test]
    fn full_buckets_are_dropped_only_once_the_limiter_holds_its_most_keys() {
        // Burst 1, one request a millisecond: a bucket is full again a millisecond after its request.
        let guard = TokenGuard::new(Duration::from_secs(30), 1000.0, 1.0);
        guard.admit_key(&[1; 32]).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        guard.admit_key(&[2; 32]).unwrap();
        assert_eq!(
            guard.buckets.len(),
            2,
            "below the bound a request does not scan every key to drop the full buckets"
        );
        for i in 2..MAX_ENTRIES {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&i.to_le_bytes());
            guard.admit_key(&key).unwrap();
        }
        assert_eq!(guard.buckets.len(), MAX_ENTRIES as usize);
        std::thread::sleep(Duration::from_millis(5));
        guard.admit_key(&[3; 32]).unwrap();
        assert_eq!(
            guard.buckets.len(),
            1,
            "past the bound the full buckets are dropped, the new key kept"
        );
    }
}
