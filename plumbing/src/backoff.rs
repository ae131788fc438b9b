//! Retry delays: exponential backoff with full jitter, capped, with `Retry-After` as a floor. Shared by
//! the agent's pushes and the ingest's alert notifications.
//!
//! A `Retry-After` is honoured with up to a fifth more on top, drawn per retry: a server that refuses
//! many clients at once with the same `Retry-After` would otherwise see them all come back in the same
//! second, and be overloaded again by the very wave it refused.
//!
//! The un-jittered sequence comes from `backon`'s exponential builder (base × 2ⁿ, capped); full jitter
//! then draws the delay uniformly from `[base/2, that]` ("full jitter" with a small floor so a busy fleet
//! does not retry in the same millisecond). The attempt count is the one persisted on the outbox rows,
//! so a restarted agent continues the sequence instead of resetting it or hammering the ingest.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use rand::Rng;

/// Backoff parameters (the agent's config section `[push]`; the ingest's `[alerts]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    pub base: Duration,
    pub cap: Duration,
}

impl BackoffPolicy {
    /// The exponential ceiling for the given attempt (1 = the first retry).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let mut delays = ExponentialBuilder::default()
            .with_min_delay(self.base)
            .with_max_delay(self.cap)
            .with_factor(2.0)
            .without_max_times()
            .build();
        let n = attempt.clamp(1, 64) as usize;
        delays.nth(n - 1).unwrap_or(self.cap).min(self.cap)
    }

    /// The delay before retrying after `attempt` failures, honouring a server's `Retry-After` as minimum
    /// (with up to a fifth more on top, so clients refused together do not return together).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let ceiling = self.ceiling(attempt);
        let floor = (self.base / 2).min(ceiling);
        let mut rng = rand::thread_rng();
        let jittered = if ceiling > floor {
            rng.gen_range(floor..=ceiling)
        } else {
            ceiling
        };
        match retry_after {
            Some(min) => {
                let min = min.min(Duration::from_secs(24 * 3600));
                let spread = min / 5;
                let after = min + rng.gen_range(Duration::ZERO..=spread);
                jittered.max(after)
            }
            None => jittered,
        }
    }
}

/// Parses `Retry-After`: delta-seconds or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let secs = (when.timestamp() - chrono::Utc::now().timestamp()).max(0);
    Some(Duration::from_secs(secs as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: BackoffPolicy = BackoffPolicy {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(60),
    };

    #[test]
    fn ceilings_double_and_stop_at_the_cap() {
        let c: Vec<u64> = (1..=8).map(|a| P.ceiling(a).as_secs()).collect();
        assert_eq!(c, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(P.ceiling(1000), Duration::from_secs(60));
    }

    #[test]
    fn delays_are_jittered_within_the_ceiling_and_respect_retry_after() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let d = P.delay(5, None);
            assert!(
                d >= Duration::from_millis(500) && d <= Duration::from_secs(16),
                "{d:?}"
            );
            seen.insert(d.as_millis());
        }
        assert!(seen.len() > 20, "full jitter spreads retries");
        let mut after = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let d = P.delay(1, Some(Duration::from_secs(30)));
            assert!(
                d >= Duration::from_secs(30) && d <= Duration::from_secs(36),
                "{d:?}"
            );
            after.insert(d.as_millis());
        }
        assert!(
            after.len() > 20,
            "clients refused together with one Retry-After come back spread over a fifth of it: {}",
            after.len()
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        assert_eq!(parse_retry_after(" 7 "), Some(Duration::from_secs(7)));
        let later = (chrono::Utc::now() + chrono::Duration::seconds(90)).to_rfc2822();
        let d = parse_retry_after(&later.replace("+0000", "GMT")).unwrap();
        assert!(
            d >= Duration::from_secs(85) && d <= Duration::from_secs(91),
            "{d:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
