//! The intake's memory bound: request bodies admitted at once (`POST /v1/events` and the OTLP
//! receiver) may hold at most `intake.max_bytes_in_flight` between them.
//!
//! A body's bytes stay alive from its first read until its answer: the buffer, then what is parsed from
//! it, then the items waiting for the commit. Each request is limited alone (`intake.max_body_bytes`), but
//! without a bound on the sum, 100 producers posting 16 MiB at once would hold gigabytes. So a request
//! reserves its size before its body is read: its `Content-Length` when it gives one and the body is read
//! as sent; the body limit when it gives none or the body is inflated (gzip), as it cannot be known before.
//! A request that cannot reserve waits, in arrival order, while its body stays unread in the socket; a
//! wait longer than [`ADMIT_WAIT`] gets 503 with `Retry-After` and nothing of it is committed. The
//! reservation is held until the request is answered.
//!
//! A body must also arrive within [`BODY_READ_TIMEOUT`] once admitted, so a producer that stalls
//! mid-body cannot hold its reservation (and the others waiting behind it) for ever.

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a request waits for room before it is refused with 503.
pub const ADMIT_WAIT: Duration = Duration::from_secs(5);
/// How long an admitted body may take to arrive.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The reservation's unit: permits are KiB, so a 64-bit total never overflows tokio's permit count.
const UNIT: usize = 1024;

/// Bytes of request bodies admitted at once (see the module notes).
#[derive(Debug)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    units: u32,
    total_bytes: usize,
}

/// Why a request's body was not taken; nothing of the request is committed. The local API and the
/// OTLP receiver each word it in their own error format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// No room within [`ADMIT_WAIT`]; `limit` is `intake.max_bytes_in_flight`.
    #[error(
        "the agent is already reading {limit} bytes of request bodies (intake.max_bytes_in_flight); \
         nothing of this request was committed, retry shortly"
    )]
    Busy { limit: usize },
    /// The body did not all arrive within [`BODY_READ_TIMEOUT`].
    #[error("the body did not arrive within {secs} s; nothing of this request was committed")]
    Late { secs: u64 },
}

impl Refused {
    /// `Retry-After` for the answer: a refusal for room is worth retrying soon.
    pub fn retry_after(&self) -> Option<HeaderValue> {
        match self {
            Refused::Busy { .. } => Some(HeaderValue::from_static("1")),
            Refused::Late { .. } => None,
        }
    }
}

impl BodyBudget {
    /// A budget of `total_bytes` (at least one unit).
    pub fn new(total_bytes: usize) -> BodyBudget {
        let units = u32::try_from(total_bytes.div_ceil(UNIT))
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize) as u32);
        BodyBudget {
            permits: Arc::new(Semaphore::new(units as usize)),
            units,
            total_bytes,
        }
    }

    /// Reserves `bytes` (capped at the whole budget, so any body the limits allow can be admitted),
    /// waiting up to `wait`; the reservation is released when the permit is dropped.
    pub async fn admit(
        &self,
        bytes: usize,
        wait: Duration,
    ) -> Result<OwnedSemaphorePermit, Refused> {
        let units = u32::try_from(bytes.div_ceil(UNIT).max(1))
            .unwrap_or(u32::MAX)
            .min(self.units);
        match tokio::time::timeout(wait, self.permits.clone().acquire_many_owned(units)).await {
            Ok(Ok(permit)) => Ok(permit),
            // Timed out, or the semaphore was closed (never done).
            _ => Err(Refused::Busy {
                limit: self.total_bytes,
            }),
        }
    }

    /// Bytes reserved by requests now (the metrics' gauge).
    pub fn in_use_bytes(&self) -> u64 {
        let free = self.permits.available_permits() as u64;
        (u64::from(self.units).saturating_sub(free)) * UNIT as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_add_up_to_the_budget_and_are_released_on_drop() {
        let budget = BodyBudget::new(10 * UNIT);
        let a = budget.admit(6 * UNIT, Duration::ZERO).await.unwrap();
        assert_eq!(budget.in_use_bytes(), 6 * UNIT as u64);
        let refused = budget.admit(5 * UNIT, Duration::from_millis(20)).await;
        assert_eq!(refused.unwrap_err(), Refused::Busy { limit: 10 * UNIT });
        let b = budget.admit(4 * UNIT, Duration::ZERO).await.unwrap();
        drop(a);
        assert_eq!(budget.in_use_bytes(), 4 * UNIT as u64);
        drop(b);
        assert_eq!(budget.in_use_bytes(), 0);
    }

    #[tokio::test]
    async fn a_waiting_request_is_admitted_when_room_is_freed() {
        let budget = Arc::new(BodyBudget::new(8 * UNIT));
        let first = budget.admit(8 * UNIT, Duration::ZERO).await.unwrap();
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.admit(3 * UNIT, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "admitted while the budget was full");
        drop(first);
        assert!(waiter.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn a_body_larger_than_the_budget_takes_all_of_it_rather_than_waiting_for_ever() {
        let budget = BodyBudget::new(4 * UNIT);
        let all = budget.admit(100 * UNIT, Duration::ZERO).await.unwrap();
        assert_eq!(budget.in_use_bytes(), 4 * UNIT as u64);
        assert!(budget.admit(1, Duration::ZERO).await.is_err());
        drop(all);
        assert!(budget.admit(0, Duration::ZERO).await.is_ok());
    }
}
