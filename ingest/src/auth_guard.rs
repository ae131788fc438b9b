//! Throttling failed authentication per client address, before the database.
//!
//! Every bearer token the cache does not know costs a database round trip ([`crate::auth::TokenGuard`]).
//! A client sending random tokens would make each request one. So, per client IP address (the TCP peer,
//! `ConnectInfo`), failed authentications drain a token bucket (`auth_failure_burst`, refilled at
//! `auth_failures_per_sec`); while an address's bucket is empty, every request from it that needs a token
//! lookup is answered 429 with `Retry-After` without touching the database. A successful request does not
//! refill the bucket faster. Unknown token hashes are also remembered for `token_cache_secs` (a negative
//! cache), so one bad token retried in a loop (a revoked token in a forgotten agent) is answered from
//! memory — and still counts as a failure of its address.
//!
//! Behind a NAT or proxy every client shares the peer address: one misbehaving client there throttles the
//! others' *new* authentications for a while (those agents back off on 429 and retry). Requests without a
//! peer address (in-process tests calling the router directly) are not throttled.
//!
//! Memory: both are bounded ([`MAX_ENTRIES`]). The negative cache is a `moka` cache (time to live
//! `token_cache_secs`, the least useful entry evicted when full); the address map is cleared when full.
//! Either can only forgive.
//!
//! The per-address buckets stay hand-written rather than a `governor` keyed limiter: a request must first
//! ask "is this address out of failures?" *without* spending anything (a success costs nothing), and only
//! a failure spends — and spending on an empty bucket must not push the address further into debt.
//! `governor` spends a cell on every successful check and has no read-only check, so it would need the
//! failure to be charged after the fact and a second structure to answer the question.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use moka::sync::Cache;

use crate::error::ApiError;

const MAX_ENTRIES: usize = 100_000;

/// Failed-authentication budgets per address and the negative token cache.
pub struct AuthGuard {
    /// Failures left per client address (absent: a full bucket).
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
    /// Token hashes a lookup found unknown, each remembered `token_cache_secs`.
    unknown: Cache<[u8; 32], ()>,
    per_sec: f64,
    burst: f64,
}

impl std::fmt::Debug for AuthGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthGuard")
            .field("per_sec", &self.per_sec)
            .field("burst", &self.burst)
            .field("unknown", &self.unknown.entry_count())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    left: f64,
    at: Instant,
}

impl AuthGuard {
    pub fn new(per_sec: f64, burst: f64, remember_for: Duration) -> AuthGuard {
        AuthGuard {
            buckets: Mutex::new(HashMap::new()),
            unknown: Cache::builder()
                .max_capacity(MAX_ENTRIES as u64)
                .time_to_live(remember_for)
                .build(),
            per_sec,
            burst,
        }
    }

    /// Runs `lookup` (the token verification) unless `ip` is throttled or the token is known to be
    /// unknown; a 401 from it counts against `ip`.
    pub async fn verify<T>(
        &self,
        ip: Option<IpAddr>,
        token_hash: [u8; 32],
        lookup: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        let now = Instant::now();
        if let Some(ip) = ip {
            self.admit(ip, now)?;
        }
        let known_bad = self.unknown.contains_key(&token_hash);
        let result = if known_bad {
            Err(ApiError::Unauthenticated)
        } else {
            lookup.await
        };
        if let Err(ApiError::Unauthenticated) = &result {
            if let Some(ip) = ip {
                self.fail(ip, now);
            }
            if !known_bad {
                self.unknown.insert(token_hash, ());
            }
        }
        result
    }

    /// Err(429) while the address has no failures left.
    fn admit(&self, ip: IpAddr, now: Instant) -> Result<(), ApiError> {
        let mut buckets = self.buckets.lock().unwrap();
        let Some(b) = buckets.get_mut(&ip) else {
            return Ok(());
        };
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.left = (b.left + elapsed * self.per_sec).min(self.burst);
        b.at = now;
        if b.left >= 1.0 {
            Ok(())
        } else {
            Err(ApiError::RateLimited(Duration::from_secs_f64(
                (1.0 - b.left) / self.per_sec,
            )))
        }
    }

    fn fail(&self, ip: IpAddr, now: Instant) {
        let mut buckets = self.buckets.lock().unwrap();
        if buckets.len() >= MAX_ENTRIES && !buckets.contains_key(&ip) {
            buckets.clear();
        }
        let b = buckets.entry(ip).or_insert(Bucket {
            left: self.burst,
            at: now,
        });
        b.left = (b.left - 1.0).max(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal_never() -> Result<(), ApiError> {
        Err(ApiError::Unauthenticated)
    }

    #[tokio::test]
    async fn an_address_is_throttled_after_its_burst_of_failures_and_recovers() {
        let guard = AuthGuard::new(10.0, 3.0, Duration::from_secs(30));
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let mut lookups = 0;
        for i in 0..10 {
            let r = guard
                .verify(Some(ip), [i; 32], async {
                    lookups += 1;
                    principal_never()
                })
                .await;
            assert!(matches!(
                r,
                Err(ApiError::Unauthenticated | ApiError::RateLimited(_))
            ));
        }
        assert_eq!(lookups, 3, "only the burst reaches the lookup");
        // Another address is not affected.
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let r = guard
            .verify(Some(other), [100; 32], async { principal_never() })
            .await;
        assert!(matches!(r, Err(ApiError::Unauthenticated)));
        tokio::time::sleep(Duration::from_millis(150)).await;
        let r = guard
            .verify(Some(ip), [101; 32], async { principal_never() })
            .await;
        assert!(matches!(r, Err(ApiError::Unauthenticated)), "refilled");
    }

    #[tokio::test]
    async fn a_token_found_unknown_is_not_looked_up_again() {
        let guard = AuthGuard::new(10.0, 100.0, Duration::from_secs(30));
        let mut lookups = 0;
        for _ in 0..5 {
            let _ = guard
                .verify(None, [7; 32], async {
                    lookups += 1;
                    principal_never()
                })
                .await;
        }
        assert_eq!(lookups, 1);
    }
}
