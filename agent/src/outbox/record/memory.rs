//! The writer's memory: what the ops of one group change ([`Delta`]) and what the writer keeps across
//! groups ([`WriterState`], [`ClaimCursor`]).
//! The bottom of the outbox's module graph: the store flushes a delta, the writer merges it into its
//! state, the ops read the state and fill the delta; this module needs none of them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::counters::Counter;
use super::item::UsageAgg;
use super::usage_time::UsageWindow;
use crate::identity::IdentityDefaults;

/// A claim not settled within this long is considered abandoned and its rows become claimable again.
pub const CLAIM_LEASE: Duration = Duration::from_secs(300);
/// The longest a claimable row behind the cursor can wait for its full scan.
pub const FULL_SCAN_EVERY: Duration = Duration::from_secs(10);

/// In-memory state shared by the ops of one group; merged into [`WriterState`] after commit.
#[derive(Default)]
pub(crate) struct Delta {
    /// Counter changes, flushed into `counters` at the end of the group.
    pub counters: BTreeMap<Counter, i64>,
    /// Usage changes per session and model (a session's few models in a list), flushed into `usage`.
    pub usage: HashMap<String, Vec<(String, UsageAgg)>>,
    /// Usage changes per quarter-hour of event time, flushed into `usage_by_time` ([`super::usage_time`]).
    pub usage_by_time: BTreeMap<i64, UsageWindow>,
    /// New events' health inputs per session, folded at the end of the group ([`super::health`]).
    pub status: BTreeMap<String, Vec<Arc<apiary_schema::status::Input>>>,
    /// New events' work facts per session, folded at the end of the group ([`super::work`]).
    pub work: BTreeMap<String, Vec<Arc<apiary_schema::work::OwnedFact>>>,
    /// Change in the number of open tool-call starts ([`crate::outbox::write::durations`]).
    pub tool_starts: i64,
    /// Sessions first bound in this group (added to the writer's cache after commit).
    pub new_sessions: HashSet<String>,
    /// Trackers this group wrote (into the writer's [`FoldCache`] after commit).
    pub trackers: HashMap<String, apiary_schema::status::Tracker>,
    /// Work folds this group wrote (likewise).
    pub works: HashMap<String, apiary_schema::work::Work>,
    /// Claimed in this group.
    pub claimed: HashMap<Uuid, ClaimedRow>,
    /// Settled in this group (leave the in-flight map after commit).
    pub settled: Vec<Uuid>,
    /// Where the next claim's scan starts, after a claim in this group.
    pub claim_cursor: Option<i64>,
    /// Set by a full claim scan in this group: the next routine full rescan (Unix ms).
    pub rescan_reset: Option<i64>,
    /// Rows behind the cursor become claimable at this time (Unix ms) at the latest: a retry falls due, a
    /// claim is released or its lease runs out, held rows are let go.
    pub rescan_at: Option<i64>,
    /// Identity defaults adopted in this group ([`crate::outbox::Outbox::adopt`]): in force for the group's
    /// later ops, and the writer's after commit.
    pub defaults: Option<IdentityDefaults>,
    /// The latest `occurred_at` in `dedup_keys` (inner `None`: the table is empty), read once per group
    /// by the first insert ([`crate::outbox::write::intake`]); outer `None` until then.
    pub dedup_keys_max: Option<Option<i64>>,
}

impl Delta {
    /// Adds `n` to a persisted counter (flushed at the end of the group).
    pub fn count(&mut self, counter: Counter, n: i64) {
        if n != 0 {
            *self.counters.entry(counter).or_insert(0) += n;
        }
    }

    /// Asks for a full claim scan from `at_ms` on.
    pub fn rescan_from(&mut self, at_ms: i64) {
        self.rescan_at = Some(self.rescan_at.map_or(at_ms, |t| t.min(at_ms)));
    }
}

/// A claimed row: where it is and the body bytes it holds (settling subtracts them from the pending
/// bytes without reading the row back).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimedRow {
    pub seq: i64,
    pub bytes: i64,
}

/// Claims scan the uploadable rows from a cursor (`seq` above the last row looked at) instead of from
/// the start, so a claim does not walk past the rows still in flight or waiting for a retry. Rows behind
/// the cursor become claimable again through a retry falling due, a release or consent letting held rows
/// go; each of those schedules a full scan ([`Delta::rescan_from`]). A full scan also runs every
/// [`FULL_SCAN_EVERY`], which covers expired leases ([`CLAIM_LEASE`] is far longer) and changes made by
/// another process (e.g. `sync enable --include-backlog` from the CLI).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ClaimCursor {
    /// The next scan starts above this `seq`.
    pub after_seq: i64,
    /// A claim at or after this time (Unix ms) scans from the start.
    pub rescan_at: i64,
}

impl ClaimCursor {
    /// This cursor with a group's changes applied (what the writer keeps after the group commits, and
    /// what a later claim in the same group starts from).
    pub fn with(self, delta: &Delta) -> ClaimCursor {
        let rescan_at = delta.rescan_reset.unwrap_or(self.rescan_at);
        ClaimCursor {
            after_seq: delta.claim_cursor.unwrap_or(self.after_seq),
            rescan_at: delta.rescan_at.map_or(rescan_at, |t| t.min(rescan_at)),
        }
    }
}

/// State owned by the writer thread across groups.
#[derive(Default)]
pub(crate) struct WriterState {
    /// Sessions already in the registry (a cache; the table is the truth).
    pub known_sessions: HashSet<String>,
    /// Rows handed to the push loop and not yet settled: event id → (row, when claimed). Settling finds
    /// its rows through this map (there is no index on `event_id` alone; see `schema`).
    pub in_flight: HashMap<Uuid, (ClaimedRow, Instant)>,
    /// The `policies.id` of the policy events are redacted under now.
    pub policy_id: i64,
    /// Identity defaults for sessions first seen here.
    pub defaults: IdentityDefaults,
    /// Where claims scan from.
    pub claims: ClaimCursor,
    /// Whether the policy lets tool-call durations through, so completions are timed
    /// ([`crate::outbox::write::durations`]).
    pub attach_durations: bool,
    /// Open tool-call starts stored (`tool_starts`), to keep them under their cap without counting.
    pub open_tool_starts: i64,
    /// The last committed trackers and work folds of recently written sessions.
    pub folds: FoldCache,
    /// The fold journal's size ([`super::journal`]); changed by the group as it writes (reloaded from
    /// the table when a group fails).
    pub journal: super::journal::JournalState,
}

/// Sessions' health trackers and work folds as last committed (the tables with the fold journal
/// replayed are the truth, see [`super::journal`]; only the writer changes them, always through this
/// cache): a group takes the cached value out, folds its new events into it, and it comes back at the
/// commit (a failed group leaves it out: read from the tables again). Bounded: past
/// [`FoldCache::MAX_SESSIONS`] sessions the older half is forgotten (read again when next written).
#[derive(Default)]
pub(crate) struct FoldCache {
    pub trackers: HashMap<String, (u64, apiary_schema::status::Tracker)>,
    pub works: HashMap<String, (u64, apiary_schema::work::Work)>,
    /// Bumped per merge: an entry's age.
    generation: u64,
}

impl FoldCache {
    /// Sessions kept (a tracker is a few KiB: 4096 of them are ~16 MiB at most).
    pub const MAX_SESSIONS: usize = 4096;

    fn merge(
        &mut self,
        trackers: HashMap<String, apiary_schema::status::Tracker>,
        works: HashMap<String, apiary_schema::work::Work>,
    ) {
        self.generation += 1;
        let g = self.generation;
        self.trackers
            .extend(trackers.into_iter().map(|(k, v)| (k, (g, v))));
        self.works
            .extend(works.into_iter().map(|(k, v)| (k, (g, v))));
        evict_older_half(&mut self.trackers);
        evict_older_half(&mut self.works);
    }
}

fn evict_older_half<V>(map: &mut HashMap<String, (u64, V)>) {
    if map.len() <= FoldCache::MAX_SESSIONS {
        return;
    }
    let mut ages: Vec<u64> = map.values().map(|(g, _)| *g).collect();
    let mid = ages.len() / 2;
    let (_, cut, _) = ages.select_nth_unstable(mid);
    let cut = *cut;
    map.retain(|_, (g, _)| *g > cut);
}

impl WriterState {
    pub fn is_in_flight(&self, id: &Uuid, delta: &Delta) -> bool {
        if delta.claimed.contains_key(id) {
            return true;
        }
        self.in_flight
            .get(id)
            .is_some_and(|(_, at)| at.elapsed() < CLAIM_LEASE)
    }

    /// The row of a claimed (in-flight) event, whatever the age of its claim.
    pub fn claimed_row(&self, id: &Uuid, delta: &Delta) -> Option<ClaimedRow> {
        delta
            .claimed
            .get(id)
            .copied()
            .or_else(|| self.in_flight.get(id).map(|(row, _)| *row))
    }

    /// Takes in a committed group's changes. Returns what is left of `delta` (its counters, usage, the
    /// events' health inputs and work facts), for the caller to free where it costs the writer nothing.
    pub fn merge(&mut self, mut delta: Delta) -> Delta {
        if let Some(defaults) = delta.defaults.take() {
            self.defaults = defaults;
        }
        self.claims = self.claims.with(&delta);
        self.known_sessions
            .extend(std::mem::take(&mut delta.new_sessions));
        self.folds.merge(
            std::mem::take(&mut delta.trackers),
            std::mem::take(&mut delta.works),
        );
        self.open_tool_starts += delta.tool_starts;
        let now = Instant::now();
        for id in std::mem::take(&mut delta.settled) {
            self.in_flight.remove(&id);
        }
        for (id, row) in std::mem::take(&mut delta.claimed) {
            self.in_flight.insert(id, (row, now));
        }
        if self.in_flight.len() > 100_000 {
            self.in_flight
                .retain(|_, (_, at)| at.elapsed() < CLAIM_LEASE * 4);
        }
        delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fold_cache_forgets_its_older_half_past_its_bound() {
        let mut cache = FoldCache::default();
        let n = FoldCache::MAX_SESSIONS + 1;
        let work = |s: String| HashMap::from([(s, apiary_schema::work::Work::default())]);
        for i in 0..n {
            cache.merge(HashMap::new(), work(format!("s{i}")));
        }
        let kept = cache.works.len();
        assert!(kept <= n / 2 + 1 && kept >= n / 2 - 1, "{kept}");
        assert!(
            cache.works.contains_key(&format!("s{}", n - 1)),
            "the newest stays"
        );
        assert!(!cache.works.contains_key("s0"), "the oldest goes");
        // A session written again is young again.
        cache.merge(HashMap::new(), work("s0".into()));
        assert!(cache.works.contains_key("s0"));
    }

    #[test]
    fn counting_zero_leaves_no_row_and_counts_add_up() {
        let mut d = Delta::default();
        d.count(Counter::Pending, 0);
        assert!(d.counters.is_empty());
        d.count(Counter::Pending, 2);
        d.count(Counter::Pending, -1);
        assert_eq!(d.counters[&Counter::Pending], 1);
    }
}
