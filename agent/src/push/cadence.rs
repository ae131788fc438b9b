//! The push cadence: when a claimed batch goes out, and when the heartbeat rides on it.
//!
//! ## Coalescing ([`Gather`])
//! A trickling runtime commits an event every few hundred milliseconds; sending each poll's worth as
//! its own batch costs the ingest a request (and a transaction) per event. So the loop keeps claiming
//! as before (a claim scans from the outbox's cursor: only rows committed since the last one are read,
//! never the whole table), but holds what it claimed in a `Gather` and sends it only when one of these
//! holds:
//! - `coalesce_interval_ms` is 0 (the old behaviour: send whatever a poll found);
//! - the gather holds `coalesce_events` events (a size trigger) or is a full batch (count or bytes):
//!   a large backlog goes out at once, one full batch after another, up to `concurrency` in flight;
//! - it holds a retry (an event whose backoff has run out has waited long enough);
//! - its oldest event was claimed `coalesce_interval_ms` + a random `[0, coalesce_jitter_ms)` ago (the
//!   jitter, drawn per gather and at most a quarter of the interval, keeps a fleet of agents started
//!   together from pushing in step);
//! - shutdown, or sync stopped (the delivery then releases the rows).
//!
//! The interval is the ingest's to set: every answer to a batch or a heartbeat carries the one it wants
//! from this device (`push_interval_ms`: its interval at rest, longer while it is loaded, with a jitter
//! per device), and once one has come it replaces `coalesce_interval_ms`, within `min_interval_ms` and
//! `max_interval_ms` ([`Coalesce::of`]). An answer without it (an older ingest) keeps the last. The
//! size trigger and full batches are unchanged: a backlog always goes at once.
//!
//! The claimed rows stay leased to this process while they wait (the lease,
//! [`crate::outbox`]'s `CLAIM_LEASE`, is minutes; the wait is seconds), so no other claim takes them; if
//! the process dies, they are pending as before and the next start sends them. An event's wait is
//! measured from its claim, at most one `poll_interval_ms` after its commit.
//!
//! ## Heartbeats riding on batches ([`BeatClock`])
//! The heartbeat is due every `heartbeat_interval_secs`. When a batch is about to go out and at least
//! half an interval passed since the last heartbeat went, the heartbeat event rides in that batch (one
//! batch at a time carries it); if the ingest answers it with verdicts, the clock restarts from then
//! and no standalone heartbeat request is needed. A standalone one still goes when a whole interval
//! passed without a heartbeat (nothing was sent, or the riding batch failed). So a device that sends
//! batches at least every half interval never sends a heartbeat request of its own, and the gap between
//! two heartbeats stays at most one interval (plus a request's time).

use std::time::{Duration, Instant};

use rand::Rng;

use super::PushSettings;
use crate::outbox::{ClaimLimits, Claimed};

/// The coalescing rule, from [`PushSettings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Coalesce {
    /// How long the oldest claimed event may wait; zero sends at once.
    pub interval: Duration,
    /// Upper bound of the random extra wait added per gather.
    pub jitter: Duration,
    /// A gather of this many events goes at once.
    pub events: usize,
    /// One batch's bounds.
    pub limits: ClaimLimits,
}

impl Coalesce {
    /// The rule of `s`, with the interval the ingest asked for (`directed`, milliseconds) in force of
    /// `coalesce_interval_ms` once it has: within `min_interval_ms` and `max_interval_ms`.
    pub fn of(s: &PushSettings, directed: Option<u64>) -> Coalesce {
        let limits = s.limits();
        let interval = match directed {
            Some(ms) => ms.clamp(s.min_interval_ms, s.max_interval_ms.max(s.min_interval_ms)),
            None => s.coalesce_interval_ms,
        };
        Coalesce {
            interval: Duration::from_millis(interval),
            jitter: Duration::from_millis(s.coalesce_jitter_ms),
            events: s.coalesce_events.clamp(1, limits.max_events),
            limits,
        }
    }

    /// The wait of a new gather: the interval plus its jitter, which is at most a quarter of the
    /// interval (with the default 500 ms, a 1 s interval waits 1–1.25 s and a 2 s one 2–2.5 s): the
    /// jitter spreads a fleet, it should not double a short interval's wait.
    fn wait(&self) -> Duration {
        let jitter_ms = self.jitter.min(self.interval / 4).as_millis() as u64;
        if jitter_ms == 0 {
            return self.interval;
        }
        let extra = rand::thread_rng().gen_range(0..jitter_ms);
        self.interval + Duration::from_millis(extra)
    }
}

/// Claimed events waiting to be sent as one batch.
#[derive(Debug, Default)]
pub(super) struct Gather {
    /// The events claimed so far (one policy), with their sessions' bindings.
    claimed: Option<Claimed>,
    /// The sum of their JSON sizes (the batch's byte bound applies to it).
    bytes: usize,
    /// When the gather must go out at the latest: its first claim + the jittered interval.
    due_at: Option<Instant>,
}

impl Gather {
    pub fn len(&self) -> usize {
        self.claimed.as_ref().map_or(0, |c| c.events.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the next claim may take so that the gather stays one batch; `None` when it is full.
    pub fn room(&self, rule: &Coalesce) -> Option<ClaimLimits> {
        let events = rule.limits.max_events.saturating_sub(self.len());
        let bytes = rule.limits.max_bytes.saturating_sub(self.bytes);
        (events > 0 && bytes > 0).then_some(ClaimLimits {
            max_events: events,
            max_bytes: bytes,
        })
    }

    /// Adds a claim. When it cannot join (another policy, or together they would pass the byte bound:
    /// a claim takes at least one event whatever its size), the gather so far is returned to be sent
    /// now and the claim starts a new one.
    #[must_use]
    pub fn add(&mut self, claimed: Claimed, rule: &Coalesce, now: Instant) -> Option<Claimed> {
        let bytes: usize = claimed.events.iter().map(|e| e.body.len()).sum();
        if claimed.events.is_empty() {
            return None;
        }
        let fits = self.claimed.as_ref().is_none_or(|g| {
            g.policy_hash == claimed.policy_hash && self.bytes + bytes <= rule.limits.max_bytes
        });
        let flushed = if fits { None } else { self.take() };
        match &mut self.claimed {
            Some(g) => {
                g.events.extend(claimed.events);
                for s in claimed.sessions {
                    if !g.sessions.iter().any(|k| k.session_id == s.session_id) {
                        g.sessions.push(s);
                    }
                }
            }
            None => {
                self.claimed = Some(claimed);
                self.due_at = Some(now + rule.wait());
            }
        }
        self.bytes += bytes;
        flushed
    }

    /// Whether the gather should go out now (see the module notes).
    pub fn ready(&self, rule: &Coalesce, now: Instant) -> bool {
        let Some(c) = &self.claimed else {
            return false;
        };
        rule.interval.is_zero()
            || c.events.len() >= rule.events
            || self.room(rule).is_none()
            || c.events.iter().any(|e| e.attempts > 0)
            || self.due_at.is_some_and(|at| now >= at)
    }

    /// When the gather must go out at the latest (`None` when empty).
    pub fn due_at(&self) -> Option<Instant> {
        self.due_at
    }

    /// Empties the gather, returning its events as one batch.
    pub fn take(&mut self) -> Option<Claimed> {
        self.bytes = 0;
        self.due_at = None;
        self.claimed.take()
    }
}

/// When the last heartbeat went, and whether one is riding in a batch in flight.
#[derive(Debug, Default)]
pub(super) struct BeatClock {
    /// When the last heartbeat was sent (standalone) or answered (riding); `None` before the first.
    last: Option<Instant>,
    /// A batch in flight carries the heartbeat: no other batch and no standalone request takes it.
    riding: bool,
}

impl BeatClock {
    /// Whether the batch about to go should carry the heartbeat; if so, the ride is taken.
    pub fn take_ride(&mut self, interval: Duration, now: Instant) -> bool {
        let due = self
            .last
            .is_none_or(|t| now.duration_since(t) >= interval / 2);
        if due && !self.riding {
            self.riding = true;
            return true;
        }
        false
    }

    /// The riding batch is done; `carried` when the ingest answered it with verdicts.
    pub fn ride_done(&mut self, carried: bool, now: Instant) {
        self.riding = false;
        if carried {
            self.last = Some(now);
        }
    }

    /// When a standalone heartbeat is due (`None` while one rides: its end decides).
    pub fn standalone_at(&self, interval: Duration, now: Instant) -> Option<Instant> {
        if self.riding {
            return None;
        }
        Some(self.last.map_or(now, |t| t + interval))
    }

    /// A standalone heartbeat was sent (or tried: a failed one is tried again an interval later).
    pub fn standalone_sent(&mut self, now: Instant) {
        self.last = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::ClaimedEvent;

    fn rule(interval_ms: u64, events: usize) -> Coalesce {
        Coalesce {
            interval: Duration::from_millis(interval_ms),
            jitter: Duration::ZERO,
            events,
            limits: ClaimLimits {
                max_events: 10,
                max_bytes: 100,
            },
        }
    }

    fn claim(n: usize, body_bytes: usize, policy: &str, attempts: u32) -> Claimed {
        Claimed {
            events: (0..n)
                .map(|_| ClaimedEvent {
                    event_id: uuid::Uuid::new_v4(),
                    body: "x".repeat(body_bytes),
                    attempts,
                })
                .collect(),
            policy_hash: policy.into(),
            ..Claimed::default()
        }
    }

    #[test]
    fn a_gather_waits_for_its_interval_then_is_ready() {
        let (r, t0) = (rule(2_000, 5), Instant::now());
        let mut g = Gather::default();
        assert!(!g.ready(&r, t0), "nothing to send");
        assert!(g.add(claim(1, 5, "p", 0), &r, t0).is_none());
        assert!(g
            .add(claim(2, 5, "p", 0), &r, t0 + Duration::from_millis(1_500))
            .is_none());
        assert!(!g.ready(&r, t0 + Duration::from_millis(1_999)));
        assert!(
            g.ready(&r, t0 + Duration::from_millis(2_000)),
            "the oldest decides"
        );
        assert_eq!(g.take().map(|c| c.events.len()), Some(3));
        assert!(g.is_empty() && g.due_at().is_none());
    }

    #[test]
    fn the_size_trigger_a_full_batch_and_a_retry_make_a_gather_ready_at_once() {
        let t0 = Instant::now();
        let mut g = Gather::default();
        let _ = g.add(claim(5, 1, "p", 0), &rule(2_000, 5), t0);
        assert!(g.ready(&rule(2_000, 5), t0), "size trigger");
        assert!(!g.ready(&rule(2_000, 6), t0));
        let _ = g.add(claim(5, 1, "p", 0), &rule(2_000, 50), t0);
        assert!(g.room(&rule(2_000, 50)).is_none());
        assert!(g.ready(&rule(2_000, 50), t0), "a full batch");
        let mut g = Gather::default();
        let _ = g.add(claim(1, 1, "p", 2), &rule(2_000, 50), t0);
        assert!(g.ready(&rule(2_000, 50), t0), "a retry that fell due");
        let mut g = Gather::default();
        let _ = g.add(claim(1, 1, "p", 0), &rule(0, 50), t0);
        assert!(g.ready(&rule(0, 50), t0), "interval 0: at once");
    }

    #[test]
    fn a_claim_that_cannot_join_flushes_the_gather_and_starts_a_new_one() {
        let (r, t0) = (rule(2_000, 50), Instant::now());
        let mut g = Gather::default();
        let _ = g.add(claim(2, 30, "p", 0), &r, t0);
        assert_eq!(
            g.room(&r),
            Some(ClaimLimits {
                max_events: 8,
                max_bytes: 40
            })
        );
        let flushed = g.add(claim(1, 50, "p", 0), &r, t0 + Duration::from_secs(1));
        assert_eq!(
            flushed.map(|c| c.events.len()),
            Some(2),
            "over the byte bound"
        );
        assert_eq!(g.len(), 1);
        assert_eq!(g.due_at(), Some(t0 + Duration::from_secs(3)), "a new clock");
        let flushed = g.add(claim(1, 1, "q", 0), &r, t0);
        assert_eq!(
            flushed.map(|c| c.policy_hash),
            Some("p".into()),
            "another policy"
        );
        assert_eq!(g.len(), 1);
    }

    #[test]
    fn jitter_stays_within_its_bound() {
        let r = Coalesce {
            jitter: Duration::from_millis(500),
            ..rule(2_000, 50)
        };
        for _ in 0..200 {
            let w = r.wait();
            assert!(w >= Duration::from_millis(2_000) && w < Duration::from_millis(2_500));
        }
    }

    #[test]
    fn the_jitter_is_at_most_a_quarter_of_a_short_interval() {
        let r = Coalesce {
            jitter: Duration::from_millis(500),
            ..rule(1_000, 50)
        };
        let waits: Vec<Duration> = (0..400).map(|_| r.wait()).collect();
        assert!(waits
            .iter()
            .all(|w| *w >= Duration::from_millis(1_000) && *w < Duration::from_millis(1_250)));
        assert!(
            waits.iter().any(|w| *w >= Duration::from_millis(1_125)),
            "the jitter is still drawn"
        );
        let tiny = Coalesce {
            jitter: Duration::from_millis(500),
            ..rule(3, 50)
        };
        assert_eq!(
            tiny.wait(),
            Duration::from_millis(3),
            "under a millisecond of jitter: none"
        );
    }

    #[test]
    fn the_heartbeat_rides_once_at_a_time_and_a_carried_one_postpones_the_standalone() {
        let (i, t0) = (Duration::from_secs(30), Instant::now());
        let mut b = BeatClock::default();
        assert_eq!(
            b.standalone_at(i, t0),
            Some(t0),
            "the first one is due at once"
        );
        b.standalone_sent(t0);
        assert!(!b.take_ride(i, t0 + Duration::from_secs(14)), "too soon");
        assert!(b.take_ride(i, t0 + Duration::from_secs(15)));
        assert!(
            !b.take_ride(i, t0 + Duration::from_secs(16)),
            "one rides at a time"
        );
        assert_eq!(b.standalone_at(i, t0 + Duration::from_secs(40)), None);
        b.ride_done(true, t0 + Duration::from_secs(16));
        assert_eq!(
            b.standalone_at(i, t0 + Duration::from_secs(30)),
            Some(t0 + Duration::from_secs(46)),
            "the standalone one is skipped at 30 s"
        );
        assert!(b.take_ride(i, t0 + Duration::from_secs(31)));
        b.ride_done(false, t0 + Duration::from_secs(32));
        assert_eq!(
            b.standalone_at(i, t0 + Duration::from_secs(32)),
            Some(t0 + Duration::from_secs(46)),
            "a failed ride leaves the clock alone"
        );
    }
}
