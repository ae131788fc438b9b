//! [`Tracker`]: a session's [`Health`] plus a small re-order window, so late events are folded in time
//! order instead of arrival order, the same way on the agent and the ingest.
//!
//! The tracker keeps the *settled* health (every input up to a horizon) and the last
//! [`REORDER_WINDOW`] inputs unfolded, sorted by `(at, id)`. A new input is inserted into the window in
//! order; the current health is the settled one with the window replayed on top (at most 32 folds). When
//! the window overflows, its oldest inputs are folded into the settled health for good. An input older
//! than the horizon (later than 32 inputs behind) can no longer be put in its place: it is folded at the
//! horizon's time. Both sides therefore agree exactly whenever events arrive less than 32 inputs out of
//! order — the agent tails each log in order, so in practice always.
//!
//! Every push returns an [`Update`]: the transitions from the settled horizon on are recomputed and
//! compared with those the last push gave (kept in the tracker); from the first difference on they
//! replace the stored ones (`seq >= first_seq`) — so a late event rewrites the recent history it changes,
//! a push that changes nothing old writes only its new transitions, and a store that applies updates in
//! order holds exactly the transitions of a fold in time order.

use serde::{Deserialize, Serialize};

use super::health::Health;
use super::input::Input;
use super::{Rules, Transition};

/// Inputs kept unfolded for re-ordering.
pub const REORDER_WINDOW: usize = 32;

/// Settled health plus the re-order window. Serialisable (stored per session).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tracker {
    pub settled: Health,
    /// Sorted by `(at, id)`, at most [`REORDER_WINDOW`] long, all after the settled horizon.
    #[serde(default)]
    pub pending: Vec<Input>,
    /// The transitions the window's inputs gave at the last push (`seq >= settled.transitions`): what the
    /// store holds beyond the settled history, so the next push writes only what changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provisional: Vec<Transition>,
    /// The health after every pending input, as the last push left it: a push whose inputs all come
    /// after the window folds only them onto it ([`Tracker::push`]). Derived, so neither stored nor
    /// compared: a tracker read back has none and its first push takes the full path.
    #[serde(skip)]
    current: Option<Health>,
}

impl PartialEq for Tracker {
    fn eq(&self, other: &Tracker) -> bool {
        self.settled == other.settled
            && self.pending == other.pending
            && self.provisional == other.provisional
    }
}

/// What a push changes in the stored history: drop every transition with `seq >= first_seq` (only when
/// `replaces` — otherwise there is none), then store `transitions` (numbered from `first_seq`).
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub first_seq: u64,
    /// Stored transitions from `first_seq` on differ from these and must be dropped first.
    pub replaces: bool,
    pub transitions: Vec<Transition>,
    /// The health after every input pushed so far (what [`Tracker::current`] would recompute).
    pub current: Health,
}

impl Tracker {
    /// Adds inputs (any order) and returns the history update. Callers pass each event once (both sides
    /// deduplicate by event id before this); a copy still in the window is ignored.
    pub fn push(&mut self, inputs: impl IntoIterator<Item = Input>, rules: &Rules) -> Update {
        let mut inputs: Vec<Input> = inputs.into_iter().collect();
        inputs.sort_by_key(Input::key);
        if self.after_window(&inputs) {
            return self.push_after(inputs, rules);
        }
        let update = self.push_any(inputs, rules);
        self.current = Some(update.current.clone());
        update
    }

    /// True when `sorted` inputs can be folded onto [`Tracker::current`] alone: there is one, they are
    /// distinct and all come after the window (after the horizon when it is empty), so the full path
    /// would put them at its end, in this order, and replay the same window before them.
    fn after_window(&self, sorted: &[Input]) -> bool {
        let Some(first) = sorted.first() else {
            return false;
        };
        let last = self
            .pending
            .last()
            .map(Input::key)
            .or(self.settled.last_key);
        self.current.is_some()
            && last.is_none_or(|k| first.key() > k)
            && sorted.windows(2).all(|w| w[0].key() < w[1].key())
    }

    /// The fast path of [`Tracker::push`] (see [`Tracker::after_window`]): the same tracker and update
    /// as the full path. The window's transitions are the last push's `provisional` ones (the same inputs
    /// replayed from the same settled health give the same transitions), so only the new inputs are
    /// folded; the settled health advances over what leaves the window.
    fn push_after(&mut self, sorted: Vec<Input>, rules: &Rules) -> Update {
        let first_seq = self.settled.transitions;
        let mut h = self.current.take().unwrap_or_else(|| self.current(rules));
        let old = std::mem::take(&mut self.provisional);
        let same = old.len();
        let mut out = old;
        let mut scratch = Vec::new();
        for i in sorted {
            h.apply(&i, rules, &mut out);
            self.pending.push(i);
            // What leaves the window settles as it goes (a large push never holds all its inputs twice).
            if self.pending.len() > REORDER_WINDOW {
                let oldest = self.pending.remove(0);
                self.settled.apply(&oldest, rules, &mut scratch);
                scratch.clear();
            }
        }
        self.keep_provisional(&out);
        self.current = Some(h.clone());
        Update {
            first_seq: first_seq + same as u64,
            replaces: false,
            transitions: out.split_off(same),
            current: h,
        }
    }

    /// Keeps the transitions of `out` that are not settled yet (those the window may still rewrite).
    fn keep_provisional(&mut self, out: &[Transition]) {
        let settled_seq = self.settled.transitions;
        self.provisional = out
            .iter()
            .filter(|t| t.seq >= settled_seq)
            .cloned()
            .collect();
    }

    /// The full path of [`Tracker::push`]: inputs put in their place in the window, which is replayed
    /// from the settled health.
    fn push_any(&mut self, inputs: Vec<Input>, rules: &Rules) -> Update {
        let first_seq = self.settled.transitions;
        let horizon = self.settled.last_key;
        for mut i in inputs {
            if let Some(h) = horizon.filter(|h| i.key() <= *h) {
                if h.1 == i.id {
                    continue;
                }
                i.at = h.0;
            }
            // Sorted by key, so a second copy of an input (same time, same id) sits right before `pos`.
            let pos = self.pending.partition_point(|p| p.key() <= i.key());
            if pos > 0 && self.pending[pos - 1].id == i.id {
                continue;
            }
            self.pending.insert(pos, i);
        }
        let overflow = self.pending.len().saturating_sub(REORDER_WINDOW);
        let mut h = self.settled.clone();
        let mut out = Vec::new();
        for (n, i) in self.pending.iter().enumerate() {
            if n == overflow {
                self.settled = h.clone();
            }
            h.apply(i, rules, &mut out);
        }
        if overflow == self.pending.len() {
            self.settled = h.clone();
        }
        self.pending.drain(..overflow);
        // Unchanged leading transitions are already stored: write from the first difference on.
        let old = std::mem::take(&mut self.provisional);
        let same = old.iter().zip(&out).take_while(|(a, b)| a == b).count();
        self.keep_provisional(&out);
        Update {
            first_seq: first_seq + same as u64,
            replaces: same < old.len(),
            transitions: out.split_off(same),
            current: h,
        }
    }

    /// The health after every input pushed so far.
    pub fn current(&self, rules: &Rules) -> Health {
        let mut h = self.settled.clone();
        let mut sink = Vec::new();
        for i in &self.pending {
            h.apply(i, rules, &mut sink);
        }
        h
    }
}
