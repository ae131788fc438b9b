//! Active time in the usage rollups (`active_ms`): the stretches a session's stored status history spends
//! in `active`, split per 15-minute bucket, kept up to date by each batch that changes the history.
//!
//! ## What is counted
//! The history is the session's stored transitions in order. A stretch runs from a transition to
//! `active` to the next transition; the last transition, when it is to `active`, runs to the session's
//! `stall_due_at` — when the no-progress rule ends it if nothing else arrives, the transition every reader
//! derives at that time (`Health::due`). So the rollups hold what the history says once its time has
//! passed, with nothing taken from a clock; the live overlays (`offline`, `crashed`) are not part of it.
//! A stretch counts its whole milliseconds (`(end − start)` truncated, as the status model's time in
//! state counts an interval), split per bucket at the whole milliseconds since its start: the piece in
//! `[b, b')` is `ms(min(end, b') − start) − ms(max(start, b) − start)`, so the pieces add up to the
//! stretch exactly, a session's rollup rows to its `time_in_state.active` once the stretch is over, and
//! the migration's backfill computes the same.
//!
//! ## Keeping it exact
//! A batch rewrites a session's history from the first transition it changes (`Update::first_seq`). The
//! change to the rollups is then the stretches of the old chain from the transition before that point
//! (with the old `stall_due_at`) taken away, and those of the new chain added — in the batch's
//! transaction, under the session row's lock, so batches of one session apply their changes one after
//! the other. The old chain is what the tracker said it stored (its provisional transitions); when the
//! tracker is rebuilt from the events, or when the session's rollup key changes (its colony or runtime
//! becomes known in this batch), the whole stored history is read and moved instead.

use apiary_schema::status::{Health, Status, Transition};
use chrono::{DateTime, DurationRound, TimeDelta, Utc};

/// One transition of a chain: the status it went to and when.
pub type Step = (Status, DateTime<Utc>);

/// A stretch of active time, `[start, end)`.
pub type Stretch = (DateTime<Utc>, DateTime<Utc>);

/// The active stretches of a chain of transitions (in order), the last one running to `due`.
pub fn stretches(chain: &[Step], due: Option<DateTime<Utc>>) -> Vec<Stretch> {
    let mut out = vec![];
    for (i, (status, at)) in chain.iter().enumerate() {
        if *status != Status::Active {
            continue;
        }
        let end = match chain.get(i + 1) {
            Some((_, next)) => Some(*next),
            None => due,
        };
        if let Some(end) = end.filter(|e| e > at) {
            out.push((*at, end));
        }
    }
    out
}

/// The pieces of a stretch per 15-minute bucket: `(bucket, milliseconds)`, non-zero ones only (see the
/// module notes).
pub fn pieces((start, end): Stretch) -> Vec<(DateTime<Utc>, i64)> {
    let quarter = TimeDelta::minutes(15);
    let since = |t: DateTime<Utc>| (t - start).num_milliseconds();
    let mut out = vec![];
    let mut b = start.duration_trunc(quarter).expect("in range");
    while b < end {
        let next = b + quarter;
        let ms = since(end.min(next)) - since(start.max(b));
        if ms != 0 {
            out.push((b, ms));
        }
        b = next;
    }
    out
}

/// The step of a transition.
pub fn step(t: &Transition) -> Step {
    (t.to, t.at)
}

/// The last stored transition of a settled health (None before its first).
pub fn last_settled(h: &Health) -> Option<Step> {
    if h.transitions == 0 {
        return None;
    }
    Some((h.status?, h.since?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn active_stretches_end_at_the_next_transition_or_the_due_time() {
        let chain = [
            (Status::Active, t("2026-11-03T10:00:00Z")),
            (Status::Stalled, t("2026-11-03T10:20:00Z")),
            (Status::Active, t("2026-11-03T10:25:00Z")),
        ];
        let due = Some(t("2026-11-03T10:40:00Z"));
        assert_eq!(
            stretches(&chain, due),
            [
                (chain[0].1, chain[1].1),
                (chain[2].1, t("2026-11-03T10:40:00Z"))
            ]
        );
        assert_eq!(
            stretches(&chain, None).len(),
            1,
            "no due: the last one is open"
        );
        assert!(stretches(&chain[1..2], due).is_empty());
    }

    #[test]
    fn pieces_split_at_quarter_hours_and_add_up_to_the_whole() {
        let s = (
            t("2026-11-03T10:00:00.9999Z"),
            t("2026-11-03T10:20:00.0005Z"),
        );
        assert_eq!(
            pieces(s),
            [
                (t("2026-11-03T10:00:00Z"), 899_000),
                (t("2026-11-03T10:15:00Z"), 300_000)
            ]
        );
        let total: i64 = pieces(s).iter().map(|p| p.1).sum();
        assert_eq!(total, (s.1 - s.0).num_milliseconds());
        assert!(pieces((s.0, s.0 + TimeDelta::microseconds(1))).is_empty());
    }
}
