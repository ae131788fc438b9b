//! The push cadence the ingest asks of its agents, set from its own load ([`Cadence`]).
//!
//! Usage and status stay exact for everything the ingest has accepted; what may stretch under load is
//! only how long an agent lets a trickle of events gather before it pushes (freshness, never exactness).
//! Every answer to `POST /v1/batches` carries `push_interval_ms`, the wait the ingest wants from that
//! device now; the agent adopts it within its own bounds (`push.min_interval_ms` and
//! `push.max_interval_ms`), and a full batch or a backlog still goes at once. An older agent ignores
//! the field.
//!
//! ## The rule
//! - **Slow batches.** A batch is slow when its server time passed `cadence_target_ms` for each started
//!   hundred events it carried (the agent's coalesced batch is up to a hundred; a backlog's thousand-event
//!   batch takes longer without the ingest being loaded).
//! - **Load, per one-second window** of the batches answered in it: *loaded* when more than 1% of them
//!   were slow (the window's p99 above the target) and at least [`MIN_SLOW`] were, or the batches in
//!   flight passed half of `max_batches_in_flight`; *calm* when at most one in four hundred were slow, or
//!   only one, and the batches in flight stayed under a quarter of `max_batches_in_flight`. A window with no batch at all (also a quiet
//!   stretch of several seconds, counted per second) is calm. At a light load (twenty batches a second)
//!   one or two slow batches are outliers, not load: the window's p99 is then one batch, and counting it
//!   as load would stretch a small fleet's interval for a single hiccup.
//! - **Levels.** The interval is `cadence_base_ms` at level 0 and doubles per level, up to
//!   `cadence_max_ms`. A loaded window raises the level by one, but not again before the new interval
//!   has passed: devices hear of a level only at their next push, so the load of the windows right after
//!   a raise is still the old cadence's, and raising on it would overshoot to the ceiling within seconds
//!   of a single burst. [`CALM_WINDOWS`] calm windows in a row
//!   lower it by one (hysteresis: a fleet that slows down does not rush back at the first quiet second,
//!   and a level is held through windows that are neither). Bigger batches at a longer interval cost the
//!   ingest far less per event (docs/scaling.md, "Small batches from a fleet"), so stretching is what
//!   restores headroom.
//! - **Jitter.** Above level 0 each device's interval is between 75% and 125% of the level's, from a hash
//!   of its id and the level: the devices a burst answered at once, which all hear "16 s" together, push
//!   again spread over half an interval rather than a fifth of one, and their different periods spread
//!   them further at each push; the fleet's mean interval is the level's, and a device's own is steady.
//! - **Past capacity.** More batches at once than the bound in force are answered 429 with `Retry-After`
//!   before their bodies are read, so neither latency nor memory grows without bound; the agent retries
//!   after it and nothing is lost. Three refusals or more in a window are load too: the fleet is asked to
//!   stretch, not only the refused devices.
//! - **A token's share.** One token holds at most `max_batches_in_flight_per_token` of the batches in
//!   flight, and at most half the bound in force; one more is refused the same way (before its body is
//!   read), so a token sending its bodies slowly on purpose cannot hold the whole bound. Those refusals
//!   are the token's excess, not the node's load: they do not raise the level. The setting at or above
//!   `max_batches_in_flight` turns the share off.
//! - **The bound follows the latency.** What a batch waits for is the batches ahead of it: on two cores
//!   256 small batches in flight are most of a second for the last one. So the bound in force moves
//!   between `min_batches_in_flight` and `max_batches_in_flight` (additive increase, multiplicative
//!   decrease, as TCP's window): a window whose p99 is slow (the *loaded* rule above) sets it to three
//!   quarters of what was in flight then, but takes at most half of it (a blip with a few batches in
//!   flight does not take it to the floor) and never below the floor; a window whose batches were on
//!   time (at most one slow in four hundred, or a single one) raises it by an eighth, and so does each
//!   quiet window, so an idle node comes back to the ceiling. A fleet the node keeps up with never
//!   meets it; after a start wave or a slow database it settles where the batches in flight are about
//!   as many as finish within the target. The server's time of a batch is counted from its body in
//!   hand: a device's slow upload is its link, not this node's load. `min_batches_in_flight` equal to
//!   `max_batches_in_flight` keeps a fixed bound. The `Retry-After` is drawn for each refusal from one
//!   second up to the current interval (rounded up to seconds): the devices refused by one burst come
//!   back spread over an interval instead of as the same burst again one interval later.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::IngestSettings;

/// Calm windows in a row before the level comes down by one.
pub const CALM_WINDOWS: u32 = 5;
/// Slow batches a window needs, beyond the 1%, to be loaded.
pub const MIN_SLOW: u64 = 3;
/// Events a batch may carry per `cadence_target_ms` of server time before it counts as slow.
const EVENTS_PER_TARGET: u64 = 100;
/// The length of one load window.
const WINDOW: Duration = Duration::from_secs(1);
/// A window on time (or quiet) raises the bound by its own share of this (an eighth), at least by one.
const GROWTH_DIVISOR: usize = 8;

/// The ingest's cadence controller and its bound on batches in flight. One per process.
#[derive(Debug)]
pub struct Cadence {
    base: Duration,
    max: Duration,
    target: Duration,
    max_in_flight: usize,
    min_in_flight: usize,
    /// Most batches in flight for one token (`max_batches_in_flight_per_token`), at most half the
    /// bound in force; None: no share (the setting at or above `max_batches_in_flight`).
    per_token: Option<usize>,
    /// The bound in force: between `min_in_flight` and `max_in_flight` (see the module notes).
    bound: AtomicUsize,
    in_flight: AtomicUsize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    level: u32,
    calm_run: u32,
    window_start: Instant,
    batches: u64,
    slow: u64,
    /// The most batches in flight seen in this window.
    peak_in_flight: usize,
    /// Batches refused in this window (the bound in force was reached).
    refused: u64,
    /// Batches in flight per token (only tokens with one at least).
    per_token: std::collections::HashMap<TokenKey, usize>,
    /// No raise before this: the interval of the last raise has not yet reached the whole fleet.
    hold_until: Instant,
}

/// A batch admitted by [`Cadence::admit`]; dropping it ends the batch's time in flight.
#[derive(Debug)]
pub struct InFlight<'a> {
    cadence: &'a Cadence,
    token: TokenKey,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.cadence.per_token.is_some() {
            let mut st = self.cadence.lock();
            if let Some(n) = st.per_token.get_mut(&self.token) {
                *n -= 1;
                if *n == 0 {
                    st.per_token.remove(&self.token);
                }
            }
        }
        self.cadence.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whose batch it is: the hash of the token it came with.
pub type TokenKey = [u8; 32];

/// The answer to a batch beyond the bound in force, or beyond its token's share of it: come back after
/// this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overloaded {
    pub retry_after: Duration,
    /// Refused for its token's share (`max_batches_in_flight_per_token`), not for the node's bound.
    pub token_share: bool,
}

impl Cadence {
    pub fn new(s: &IngestSettings) -> Cadence {
        let mut c = Cadence::with(
            Duration::from_millis(s.cadence_base_ms),
            Duration::from_millis(s.cadence_max_ms),
            Duration::from_millis(s.cadence_target_ms),
            (s.min_batches_in_flight, s.max_batches_in_flight),
            Instant::now(),
        );
        c.per_token = (s.max_batches_in_flight_per_token < c.max_in_flight)
            .then_some(s.max_batches_in_flight_per_token.max(1));
        c
    }

    fn with(
        base: Duration,
        max: Duration,
        target: Duration,
        (min_in_flight, max_in_flight): (usize, usize),
        now: Instant,
    ) -> Cadence {
        let max_in_flight = max_in_flight.max(1);
        Cadence {
            base,
            max: max.max(base),
            target,
            max_in_flight,
            min_in_flight: min_in_flight.clamp(1, max_in_flight),
            per_token: None,
            bound: AtomicUsize::new(max_in_flight),
            in_flight: AtomicUsize::new(0),
            state: Mutex::new(State {
                level: 0,
                calm_run: 0,
                window_start: now,
                batches: 0,
                slow: 0,
                peak_in_flight: 0,
                refused: 0,
                per_token: std::collections::HashMap::new(),
                hold_until: now,
            }),
        }
    }

    /// Admits a batch that came with `token`, or refuses it when the bound in force is in flight
    /// already, or when that token has its share of it in flight.
    pub fn admit(&self, token: &TokenKey) -> Result<InFlight<'_>, Overloaded> {
        self.admit_at(token, Instant::now())
    }

    fn admit_at(&self, token: &TokenKey, now: Instant) -> Result<InFlight<'_>, Overloaded> {
        let mut st = self.lock();
        // A window that ended moves the bound before this batch is judged by it.
        self.roll(&mut st, now);
        // Taken under the lock: a refused batch never counts as in flight, even for an instant.
        let before = self.in_flight.load(Ordering::Acquire);
        let bound = self.bound.load(Ordering::Acquire);
        let whole = before >= bound;
        // A token's share is at most half the bound in force: with the bound brought down by a slow
        // database, one token still cannot hold all of it.
        let share = self.per_token.map(|p| p.min((bound / 2).max(1)));
        let mine = st.per_token.get(token).copied().unwrap_or(0);
        if whole || share.is_some_and(|share| mine >= share) {
            // One token past its share is not the node's load: only the bound's refusals count.
            if whole {
                st.refused += 1;
            }
            let interval = self.at_level(st.level);
            drop(st);
            let secs = interval.as_millis().div_ceil(1000) as u64;
            let secs = rand::Rng::gen_range(&mut rand::thread_rng(), 1..=secs.max(1));
            return Err(Overloaded {
                retry_after: Duration::from_secs(secs),
                token_share: !whole,
            });
        }
        if share.is_some() {
            *st.per_token.entry(*token).or_insert(0) += 1;
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        st.peak_in_flight = st.peak_in_flight.max(before + 1);
        Ok(InFlight {
            cadence: self,
            token: *token,
        })
    }

    /// Records one answered batch of `events` events and the server time it took.
    pub fn observe(&self, took: Duration, events: u64) {
        self.observe_at(took, events, Instant::now());
    }

    fn observe_at(&self, took: Duration, events: u64, now: Instant) {
        let allowed = self
            .target
            .saturating_mul(events.div_ceil(EVENTS_PER_TARGET).clamp(1, u32::MAX as u64) as u32);
        let mut st = self.lock();
        self.roll(&mut st, now);
        st.batches += 1;
        if took > allowed {
            st.slow += 1;
        }
    }

    /// The interval the ingest asks of `device` now (the same for a device within a level).
    pub fn interval_for(&self, device: Option<&str>) -> Duration {
        self.interval_for_at(device, Instant::now())
    }

    fn interval_for_at(&self, device: Option<&str>, now: Instant) -> Duration {
        let level = self.level_at(now);
        let interval = self.at_level(level);
        if level == 0 {
            return interval;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (device.unwrap_or(""), level).hash(&mut h);
        let permille = 750 + h.finish() % 500; // 75% to 125%
        interval * permille as u32 / 1000
    }

    fn interval_at(&self, now: Instant) -> Duration {
        self.at_level(self.level_at(now))
    }

    /// The interval of the load's level now (before each device's own share of it).
    pub fn level_interval(&self) -> Duration {
        self.interval_at(Instant::now())
    }

    /// The bound on batches in flight in force now.
    pub fn bound(&self) -> usize {
        self.bound.load(Ordering::Acquire)
    }

    /// The level at `now` (0 = at rest), after closing the windows that ended before it.
    fn level_at(&self, now: Instant) -> u32 {
        let mut st = self.lock();
        self.roll(&mut st, now);
        st.level
    }

    fn at_level(&self, level: u32) -> Duration {
        let factor = 1u32.checked_shl(level).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// The highest level worth having (its interval reaches `max`).
    fn top(&self) -> u32 {
        let mut level = 0;
        while self.at_level(level) < self.max && level < 31 {
            level += 1;
        }
        level
    }

    /// Closes the windows that ended before `now` and moves the level (see the module notes).
    fn roll(&self, st: &mut State, now: Instant) {
        let elapsed = now.saturating_duration_since(st.window_start);
        if elapsed < WINDOW {
            return;
        }
        let in_flight = self.in_flight.load(Ordering::Acquire);
        let peak = st.peak_in_flight.max(in_flight);
        let (batches, slow, refused) = (st.batches, st.slow, st.refused);
        let slow_p99 = slow >= MIN_SLOW && slow * 100 > batches;
        let loaded = slow_p99 || peak * 2 > self.max_in_flight || refused >= MIN_SLOW;
        // At most one slow batch in four hundred, or a single one: the batches were on time.
        let on_time = slow * 400 <= batches || slow <= 1;
        let calm = on_time && peak * 4 < self.max_in_flight;
        // Whole windows with no batch at all after this one.
        let quiet = (elapsed.as_millis() / WINDOW.as_millis()).saturating_sub(1);
        let bound = self.bound.load(Ordering::Acquire);
        let grow = |b: usize| {
            b.saturating_add((b / GROWTH_DIVISOR).max(1))
                .min(self.max_in_flight)
        };
        let mut to = bound;
        if slow_p99 {
            // Multiplicative decrease, from what was in flight (a bound far above it would not bind),
            // by at most half in one window (a blip at a light load, a few batches in flight, does
            // not take it to the floor). Halving from what was in flight refused more at 5,000
            // devices in the fleet bench and stored less (docs/scaling.md).
            to = (peak.min(bound) * 3 / 4)
                .max(bound / 2)
                .max(self.min_in_flight)
                .min(bound);
        } else if on_time {
            // Additive increase in a window whose batches were on time.
            to = grow(to);
        }
        // And in each quiet window after it.
        for _ in 0..quiet.min(64) {
            to = grow(to);
        }
        self.bound.store(to, Ordering::Release);
        // Decisions are dated by the end of the window they judge, however late it is rolled.
        let window_end = st.window_start + WINDOW;
        if loaded {
            if window_end >= st.hold_until && st.level < self.top() {
                st.level += 1;
                st.hold_until = window_end + self.at_level(st.level);
            }
            st.calm_run = 0;
        } else if calm {
            st.calm_run += 1;
        } else {
            st.calm_run = 0;
        }
        // The quiet windows are calm, one each.
        if in_flight * 4 < self.max_in_flight {
            st.calm_run = st
                .calm_run
                .saturating_add(quiet.min(u32::MAX as u128) as u32);
        }
        while st.calm_run >= CALM_WINDOWS && st.level > 0 {
            st.level -= 1;
            st.calm_run -= CALM_WINDOWS;
        }
        if st.level == 0 {
            st.calm_run = st.calm_run.min(CALM_WINDOWS);
        }
        st.window_start += WINDOW * (elapsed.as_millis() / WINDOW.as_millis()) as u32;
        st.batches = 0;
        st.slow = 0;
        st.refused = 0;
        st.peak_in_flight = in_flight;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cadence(now: Instant) -> Cadence {
        Cadence::with(
            Duration::from_secs(2),
            Duration::from_secs(30),
            Duration::from_millis(100),
            (8, 8),
            now,
        )
    }

    /// One window of `n` batches of which `slow` took longer than the target.
    fn window(c: &Cadence, start: Instant, n: u32, slow: u32) -> Instant {
        for i in 0..n {
            let took = if i < slow { 250 } else { 10 };
            c.observe_at(
                Duration::from_millis(took),
                20,
                start + Duration::from_millis(10),
            );
        }
        start + WINDOW
    }

    /// `seconds` loaded windows in a row (half of each window's hundred batches slow).
    fn loaded_for(c: &Cadence, start: Instant, seconds: u32) -> Instant {
        (0..seconds).fold(start, |t, _| window(c, t, 100, 50))
    }

    #[test]
    fn at_a_light_load_one_or_two_slow_batches_are_outliers_not_load() {
        let t0 = Instant::now();
        let c = cadence(t0);
        // Twenty batches a second, two slow (10%): not loaded.
        let mut t = window(&c, t0, 20, 2);
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 0);
        // Three slow of twenty: loaded.
        t = window(&c, t, 20, 3);
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 1);
        // Windows with one slow batch each are calm: the level comes back down.
        for _ in 0..CALM_WINDOWS {
            t = window(&c, t, 20, 1);
        }
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 0);
    }

    #[test]
    fn a_large_batch_has_time_in_proportion_to_its_events() {
        let t0 = Instant::now();
        let c = cadence(t0);
        // A backlog's thousand-event batches at 600 ms each (the target is 100 ms per hundred events).
        let at = t0 + Duration::from_millis(10);
        for _ in 0..10 {
            c.observe_at(Duration::from_millis(600), 1000, at);
        }
        c.interval_for_at(None, t0 + WINDOW);
        assert_eq!(c.lock().level, 0, "in proportion: not slow");
        // The same time for twenty events each is slow, and ten of them are load.
        for _ in 0..10 {
            c.observe_at(
                Duration::from_millis(600),
                20,
                t0 + WINDOW + Duration::from_millis(10),
            );
        }
        c.interval_for_at(None, t0 + WINDOW * 2);
        assert_eq!(c.lock().level, 1);
    }

    #[test]
    fn at_rest_the_interval_is_the_base_for_every_device() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let t = window(&c, t0, 100, 0);
        assert_eq!(c.interval_for_at(Some("a"), t), Duration::from_secs(2));
        assert_eq!(c.interval_for_at(Some("b"), t), Duration::from_secs(2));
    }

    #[test]
    fn loaded_windows_double_the_interval_up_to_the_max_each_raise_held_for_its_interval() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let mut t = t0;
        let mut raises = Vec::new();
        for second in 1..=40u64 {
            let before = c.lock().level;
            t = window(&c, t, 100, 10);
            c.interval_for_at(None, t);
            let level = c.lock().level;
            if level != before {
                raises.push((second, level));
            }
        }
        // Raised at 1 s to 4 s, held 4 s; to 8 s at 5 s, held 8 s; to 16 s at 13 s; to 30 s at 29 s.
        assert_eq!(raises, [(1, 1), (5, 2), (13, 3), (29, 4)]);
        assert_eq!(
            c.at_level(4),
            Duration::from_secs(30),
            "16 s doubles to 32 s: capped at 30 s"
        );
    }

    #[test]
    fn a_single_burst_raises_the_level_once() {
        let t0 = Instant::now();
        let c = cadence(t0);
        // A start wave: two loaded seconds, then the fleet at its new interval is calm.
        let mut t = window(&c, t0, 100, 50);
        t = window(&c, t, 100, 50);
        c.interval_for_at(None, t);
        assert_eq!(
            c.lock().level,
            1,
            "the second second still carried the old cadence"
        );
        for _ in 0..CALM_WINDOWS {
            t = window(&c, t, 100, 0);
        }
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 0);
    }

    #[test]
    fn a_few_slow_batches_are_not_load() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let t = window(&c, t0, 300, 3); // 1%: not above
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 0);
        let t = window(&c, t, 300, 4); // above 1%: the window's p99 is slow
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 1);
    }

    #[test]
    fn the_level_comes_down_only_after_calm_windows_in_a_row() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let mut t = loaded_for(&c, t0, 5);
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 2);
        // Four calm windows, then one neither calm nor loaded (two of a hundred): the run starts again.
        for _ in 0..4 {
            t = window(&c, t, 100, 0);
        }
        t = window(&c, t, 100, 2);
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 2, "held");
        for _ in 0..5 {
            t = window(&c, t, 100, 0);
        }
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 1);
    }

    #[test]
    fn a_window_is_calm_while_its_slow_batches_stay_within_one_in_four_hundred() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let mut t = loaded_for(&c, t0, 1);
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 1);
        // Two slow of 800 each second: calm, the level comes down after the run of calm windows.
        for _ in 0..CALM_WINDOWS {
            t = window(&c, t, 800, 2);
        }
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 0);
        // Two slow of 400 is calm too; three of 400 is neither: a raised level is held.
        t = loaded_for(&c, t + Duration::from_secs(10), 1);
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 1);
        for _ in 0..CALM_WINDOWS {
            t = window(&c, t, 400, 3);
        }
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 1, "held");
    }

    #[test]
    fn a_quiet_stretch_counts_as_calm_windows() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let t = loaded_for(&c, t0, 13);
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 3);
        // Ten seconds with no batch: two levels down (five calm windows each).
        c.interval_for_at(None, t + Duration::from_secs(10) + Duration::from_millis(1));
        assert_eq!(c.lock().level, 1);
    }

    #[test]
    fn a_quiet_stretch_right_after_load_counts_as_calm_too() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let t = window(&c, t0, 100, 50);
        // The last window before the quiet was loaded: it raises the level, the quiet brings it down.
        c.interval_for_at(None, t + Duration::from_secs(11) + Duration::from_millis(1));
        assert_eq!(c.lock().level, 0);
    }

    #[test]
    fn above_rest_each_device_gets_its_own_steady_interval_within_a_quarter_of_the_level() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let t = window(&c, t0, 100, 50);
        let base = Duration::from_secs(4);
        let mut distinct = std::collections::HashSet::new();
        let mut sum = Duration::ZERO;
        for d in 0..400 {
            let id = format!("dev-{d}");
            let i = c.interval_for_at(Some(&id), t);
            assert!(i >= base * 3 / 4 && i < base * 5 / 4, "{i:?}");
            assert_eq!(i, c.interval_for_at(Some(&id), t), "steady for a device");
            distinct.insert(i);
            sum += i;
        }
        assert!(distinct.len() > 200, "spread: {}", distinct.len());
        let mean = sum / 400;
        assert!(
            mean > base * 19 / 20 && mean < base * 21 / 20,
            "the fleet's mean interval is the level's: {mean:?}"
        );
    }

    #[test]
    fn beyond_the_bound_in_flight_a_batch_is_refused_with_the_interval() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let held: Vec<_> = (0..8).map(|_| c.admit(&[0; 32]).unwrap()).collect();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..100 {
            seen.insert(c.admit(&[0; 32]).unwrap_err().retry_after.as_secs());
        }
        assert_eq!(seen, [1, 2].into(), "one second up to the 2 s interval");
        drop(held);
        assert!(c.admit(&[0; 32]).is_ok(), "room again once they end");
    }

    #[test]
    fn a_token_past_its_share_is_refused_while_others_are_taken_and_that_is_not_load() {
        let t = Instant::now();
        let mut c = Cadence::with(
            Duration::from_secs(1),
            Duration::from_secs(30),
            Duration::from_millis(100),
            (16, 16),
            t,
        );
        c.per_token = Some(2);
        let (a, b) = ([1; 32], [2; 32]);
        let held: Vec<_> = (0..2).map(|_| c.admit_at(&a, t).unwrap()).collect();
        for _ in 0..5 {
            let refused = c.admit_at(&a, t).unwrap_err();
            assert!(refused.token_share, "{refused:?}");
            assert_eq!(refused.retry_after, Duration::from_secs(1));
        }
        let other = c.admit_at(&b, t).unwrap();
        assert_eq!(
            c.in_flight.load(Ordering::Acquire),
            3,
            "the refused never count"
        );
        // Five refusals of one token's share in a window: not the node's load.
        assert_eq!(c.interval_at(t + WINDOW), Duration::from_secs(1));
        assert_eq!(c.bound(), 16);
        drop(held);
        assert!(
            c.admit_at(&a, t).is_ok(),
            "its share is free once its batches end"
        );
        drop(other);
        assert!(
            c.lock().per_token.is_empty(),
            "nothing kept of a token without batches"
        );
        assert_eq!(c.in_flight.load(Ordering::Acquire), 0);

        // A share above half the bound in force is half of it.
        c.per_token = Some(32);
        let held: Vec<_> = (0..8).map(|_| c.admit_at(&a, t).unwrap()).collect();
        assert!(
            c.admit_at(&a, t).unwrap_err().token_share,
            "8 of a bound of 16"
        );
        assert!(c.admit_at(&b, t).is_ok());
        drop(held);
    }

    #[test]
    fn the_devices_refused_by_one_burst_are_asked_back_spread_over_the_interval() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let t = loaded_for(&c, t0, 29);
        c.interval_for_at(None, t);
        assert_eq!(c.interval_at(t), Duration::from_secs(30));
        // (The test's windows end 29 s ahead of the clock `admit` reads: it rolls none of them.)
        let held: Vec<_> = (0..8).map(|_| c.admit(&[0; 32]).unwrap()).collect();
        let mut by_second = [0u32; 31];
        for _ in 0..3000 {
            let s = c.admit(&[0; 32]).unwrap_err().retry_after.as_secs() as usize;
            assert!((1..=30).contains(&s), "{s}");
            by_second[s] += 1;
        }
        // Uniform over 1..=30 s: about a hundred each; none empty, none holding the wave.
        let (lo, hi) = (by_second[1..].iter().min(), by_second[1..].iter().max());
        assert!(lo > Some(&40) && hi < Some(&200), "{by_second:?}");
        drop(held);
    }

    /// A cadence whose bound moves between 4 and 64.
    fn adaptive(now: Instant) -> Cadence {
        Cadence::with(
            Duration::from_secs(2),
            Duration::from_secs(30),
            Duration::from_millis(100),
            (4, 64),
            now,
        )
    }

    /// Holds `n` batches in flight at `now` (as many as the bound admits).
    fn hold(c: &Cadence, n: usize, now: Instant) -> Vec<InFlight<'_>> {
        (0..n)
            .filter_map(|_| c.admit_at(&[0; 32], now).ok())
            .collect()
    }

    #[test]
    fn a_slow_window_sets_the_bound_to_three_quarters_of_what_was_in_flight_at_most_halving_it() {
        let t0 = Instant::now();
        let c = adaptive(t0);
        assert_eq!(c.bound(), 64, "starts at the ceiling");
        // Sixty in flight and a slow p99: three quarters of sixty.
        let held = hold(&c, 60, t0);
        let mut t = window(&c, t0, 100, 50);
        drop(held);
        c.interval_for_at(None, t);
        assert_eq!(c.bound(), 45);
        // Slow windows with four in flight: at most half of the bound each, not below the floor.
        let mut bounds = Vec::new();
        for _ in 0..5 {
            let held = hold(&c, 4, t);
            t = window(&c, t, 100, 50);
            drop(held);
            c.interval_for_at(None, t);
            bounds.push(c.bound());
        }
        assert_eq!(bounds, [22, 11, 5, 4, 4]);
    }

    #[test]
    fn beyond_the_bound_in_force_a_batch_is_refused_and_refusals_are_load() {
        let t0 = Instant::now();
        let c = adaptive(t0);
        let held = hold(&c, 40, t0);
        let mut t = window(&c, t0, 100, 50);
        drop(held);
        c.interval_for_at(None, t);
        assert_eq!(
            (c.lock().level, c.bound()),
            (1, 32),
            "half of the ceiling at most"
        );
        // Windows neither on time nor slow (two slow of a hundred) hold the bound and the level,
        // past the raise's hold of 4 s.
        for _ in 0..4 {
            t = window(&c, t, 100, 2);
        }
        c.interval_for_at(None, t);
        assert_eq!((c.lock().level, c.bound()), (1, 32));
        // Thirty-two in flight (twice that is the ceiling, not above it: not load by itself); the
        // thirty-third is refused, and never counted in flight.
        let held = hold(&c, 32, t);
        assert_eq!(held.len(), 32);
        let refused = (0..3).filter(|_| c.admit_at(&[0; 32], t).is_err()).count();
        assert_eq!(refused, 3);
        assert_eq!(c.in_flight.load(Ordering::Acquire), 32);
        // Three refusals in a window raise the level, though no batch was slow.
        t = window(&c, t, 100, 2);
        drop(held);
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 2);
    }

    #[test]
    fn windows_on_time_and_quiet_ones_raise_the_bound_by_an_eighth_up_to_the_ceiling() {
        let t0 = Instant::now();
        let c = adaptive(t0);
        c.bound.store(8, Ordering::Release);
        // Windows whose batches were on time, with few in flight: +1 (an eighth of 8, at least
        // one), then an eighth of each, up to the ceiling and no further.
        let mut t = t0;
        let mut bounds = Vec::new();
        for _ in 0..30 {
            t = window(&c, t, 100, 0);
            c.interval_for_at(None, t);
            bounds.push(c.bound());
        }
        assert_eq!(&bounds[..6], [9, 10, 11, 12, 13, 14]);
        assert_eq!(bounds[29], 64, "{bounds:?}");
        assert!(bounds.windows(2).all(|w| w[0] <= w[1]), "{bounds:?}");
        // A window neither on time nor slow (two slow of a hundred): held.
        c.bound.store(20, Ordering::Release);
        t = window(&c, t, 100, 2);
        c.interval_for_at(None, t);
        assert_eq!(c.bound(), 20);
        // An idle node comes back too: the window judged and each quiet one after it.
        c.bound.store(8, Ordering::Release);
        c.interval_for_at(None, t + Duration::from_millis(3_500));
        assert_eq!(c.bound(), 11);
    }

    #[test]
    fn a_bound_with_its_floor_at_the_ceiling_is_fixed() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let held = hold(&c, 8, t0);
        let t = window(&c, t0, 100, 50);
        drop(held);
        c.interval_for_at(None, t);
        assert_eq!(c.bound(), 8);
        let t = window(&c, t, 100, 0);
        c.interval_for_at(None, t);
        assert_eq!(c.bound(), 8);
    }

    #[test]
    fn many_batches_in_flight_are_load_even_when_each_is_fast() {
        let t0 = Instant::now();
        let c = cadence(t0);
        let held: Vec<_> = (0..5).map(|_| c.admit(&[0; 32]).unwrap()).collect();
        let t = window(&c, t0, 10, 0);
        c.interval_for_at(None, t);
        assert_eq!(c.lock().level, 1);
        drop(held);
    }
}
