//! The persisted outcome counters: one row per [`Counter`] in the `counters` table, added to in the
//! transaction that decides each outcome, and read back as [`Counters`].
//!
//! `received = delivered + duplicate + rejected + filtered + evicted + purged + exported + pending`
//! ([`Counters::balanced`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One persisted counter: a row of the `counters` table, named by [`Counter::name`].
/// `received = delivered + duplicate + rejected + filtered + evicted + purged + exported + pending`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Counter {
    Received,
    Delivered,
    Duplicate,
    Rejected,
    Filtered,
    Evicted,
    Purged,
    Exported,
    Pending,
    PendingBytes,
    /// Submissions refused at the door (cap reached under `reject`): not received, the producer retries.
    Refused,
    /// Filtered events by the filter's reason (`filtered.<reason>`).
    FilteredBy(String),
    /// Drops not yet reported upstream as `outbox.dropped` (`drops_unreported.<reason>`).
    Unreported(DropReason),
}

/// Why events were dropped, as reported upstream in `outbox.dropped` (`data.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum DropReason {
    /// Evicted at the cap under `drop_oldest`.
    Evicted,
    /// Unreadable input, dead-lettered at intake.
    Malformed,
    /// Refused by the ingest, dead-lettered.
    Rejected,
}

/// Name prefix of the [`Counter::FilteredBy`] rows.
pub(crate) const FILTERED_PREFIX: &str = "filtered.";
/// Name prefix of the [`Counter::Unreported`] rows.
pub(crate) const UNREPORTED_PREFIX: &str = "drops_unreported.";

impl Counter {
    /// The row name in `counters`.
    pub fn name(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Counter::Received => "received",
            Counter::Delivered => "delivered",
            Counter::Duplicate => "duplicate",
            Counter::Rejected => "rejected",
            Counter::Filtered => "filtered",
            Counter::Evicted => "evicted",
            Counter::Purged => "purged",
            Counter::Exported => "exported",
            Counter::Pending => "pending",
            Counter::PendingBytes => "pending_bytes",
            Counter::Refused => "refused",
            Counter::FilteredBy(reason) => return format!("{FILTERED_PREFIX}{reason}").into(),
            Counter::Unreported(reason) => {
                return format!("{UNREPORTED_PREFIX}{}", reason.as_str()).into()
            }
        })
    }
}

impl DropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Evicted => "evicted",
            DropReason::Malformed => "malformed",
            DropReason::Rejected => "rejected",
        }
    }

    /// The reason of a `drops_unreported.<reason>` row name.
    pub fn from_counter_name(name: &str) -> Option<DropReason> {
        match name.strip_prefix(UNREPORTED_PREFIX)? {
            "evicted" => Some(DropReason::Evicted),
            "malformed" => Some(DropReason::Malformed),
            "rejected" => Some(DropReason::Rejected),
            _ => None,
        }
    }
}

/// Persisted outcome counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    pub received: u64,
    pub delivered: u64,
    pub duplicate: u64,
    pub rejected: u64,
    pub filtered: u64,
    pub evicted: u64,
    pub purged: u64,
    pub exported: u64,
    pub pending: u64,
    pub pending_bytes: u64,
    /// Events refused at the door (cap reached under `reject`). Not received: the producer retries.
    pub refused: u64,
}

impl Counters {
    /// The totals in a map of stored rows (name → value; missing rows are 0).
    pub(crate) fn from_rows(rows: &BTreeMap<String, i64>) -> Counters {
        let g = |c: Counter| rows.get(c.name().as_ref()).copied().unwrap_or(0).max(0) as u64;
        Counters {
            received: g(Counter::Received),
            delivered: g(Counter::Delivered),
            duplicate: g(Counter::Duplicate),
            rejected: g(Counter::Rejected),
            filtered: g(Counter::Filtered),
            evicted: g(Counter::Evicted),
            purged: g(Counter::Purged),
            exported: g(Counter::Exported),
            pending: g(Counter::Pending),
            pending_bytes: g(Counter::PendingBytes),
            refused: g(Counter::Refused),
        }
    }

    /// The sum of the terminal outcomes plus pending.
    pub fn accounted(&self) -> u64 {
        self.delivered
            + self.duplicate
            + self.rejected
            + self.filtered
            + self.evicted
            + self.purged
            + self.exported
            + self.pending
    }

    /// received = delivered + duplicate + rejected + filtered + evicted + purged + exported + pending.
    pub fn balanced(&self) -> bool {
        self.received == self.accounted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_names_are_the_stored_row_names() {
        assert_eq!(Counter::PendingBytes.name(), "pending_bytes");
        assert_eq!(
            Counter::FilteredBy("chatty".into()).name(),
            "filtered.chatty"
        );
        let unreported = Counter::Unreported(DropReason::Malformed).name();
        assert_eq!(unreported, "drops_unreported.malformed");
        assert_eq!(
            DropReason::from_counter_name(&unreported),
            Some(DropReason::Malformed)
        );
        assert_eq!(DropReason::from_counter_name("filtered.x"), None);
    }

    #[test]
    fn counters_read_from_rows_ignore_the_per_reason_rows() {
        let rows: BTreeMap<String, i64> = [("received", 3), ("pending", 2), ("filtered", 1)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .chain([("filtered.chatty".to_string(), 1)])
            .collect();
        let c = Counters::from_rows(&rows);
        assert_eq!((c.received, c.pending, c.filtered), (3, 2, 1));
        assert!(c.balanced());
    }

    /// cargo-mutants: `balanced -> true` and a deleted `"rejected"` arm survived every agent test.
    #[test]
    fn every_drop_reason_round_trips_and_an_unbalanced_account_says_so() {
        for r in [
            DropReason::Evicted,
            DropReason::Malformed,
            DropReason::Rejected,
        ] {
            let name = Counter::Unreported(r).name();
            assert_eq!(DropReason::from_counter_name(&name), Some(r), "{name}");
        }
        let lost = Counters {
            received: 3,
            delivered: 2,
            ..Counters::default()
        };
        assert!(!lost.balanced());
        assert!(Counters {
            received: 3,
            delivered: 2,
            rejected: 1,
            ..Counters::default()
        }
        .balanced());
    }
}
