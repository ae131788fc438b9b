//! Why the push loop pauses sync, and what lifts each pause: the one table that `status`, the settings
//! page and `doctor` take their words from, and that the Troubleshooting page lists (a test below checks
//! that every row's words and fix are on `docs/troubleshooting.md`).
//!
//! A pause is stored as a code (`sync.paused_reason`), alone or followed by `: ` and the detail (for
//! `identity-mismatch`, the setting that contradicts the token). Each fix is the whole fix: the loop
//! lifts a `re-authenticate` or `identity-mismatch` pause by itself once the token file is right
//! ([`super::settle`]); turning sharing on again clears an `invalid-endpoint` pause.

use super::{INVALID_ENDPOINT, REAUTHENTICATE};
use crate::identity::IDENTITY_MISMATCH;

/// One pause reason, in plain words, with its fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    /// The code `sync.paused_reason` starts with.
    pub code: &'static str,
    /// What happened.
    pub words: &'static str,
    /// What lifts the pause, with nothing else to do.
    pub fix: &'static str,
}

/// Every reason the push loop pauses sync for.
pub const PAUSES: [Pause; 3] = [
    Pause {
        code: REAUTHENTICATE,
        words: "the ingest refused the token, or the token file cannot be used (missing, empty, or \
                readable by others)",
        fix: "put a valid ingest token in the token file, readable by you only (`chmod 600 FILE`): \
              sharing resumes by itself within seconds",
    },
    Pause {
        code: INVALID_ENDPOINT,
        words: "the stored endpoint is not allowed (it must be https://, or http:// to a loopback \
                address)",
        fix: "turn sharing on again with a correct endpoint: `apiary-agent sync enable --endpoint \
              https://INGEST --token-file FILE`, or the settings page's form",
    },
    Pause {
        code: IDENTITY_MISMATCH,
        words: "the token belongs to another user or device than this agent is set up for",
        fix: "put a token for this user and device in the token file (sharing resumes by itself), or \
              change the [identity] setting the reason names and restart the agent",
    },
];

/// The row of a stored pause reason (`code` or `code: detail`); `None` for a reason no row knows.
pub fn of(reason: &str) -> Option<&'static Pause> {
    PAUSES.iter().find(|p| {
        reason
            .strip_prefix(p.code)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
    })
}

/// A stored pause reason in plain words, with its fix: `words[: detail]. Fix: fix.` (the reason as
/// stored when no row knows it).
pub fn explain(reason: &str) -> String {
    match of(reason) {
        Some(p) => {
            let detail = &reason[p.code.len()..];
            format!("{}{detail}. Fix: {}.", p.words, p.fix)
        }
        None => reason.to_string(),
    }
}

/// The Troubleshooting page read as the tables' tests read it (this table's and doctor's problems').
#[cfg(test)]
pub(crate) mod page {
    /// `text` with Markdown's backticks and escapes removed and its whitespace collapsed, so a sentence
    /// wrapped or marked up on the page still matches.
    pub(crate) fn plain(text: &str) -> String {
        text.replace(['`', '\\'], "")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Every table row of `docs/troubleshooting.md`, [`plain`].
    pub(crate) fn rows() -> Vec<String> {
        let page = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/troubleshooting.md"),
        )
        .unwrap();
        page.lines()
            .filter(|l| l.starts_with('|'))
            .map(plain)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::page::{plain, rows};
    use super::*;

    #[test]
    fn every_pause_reads_with_its_detail_and_its_fix() {
        let r = explain("identity-mismatch: identity.device_id is \"a\" but …");
        assert!(
            r.starts_with("the token belongs to another user or device than this agent is set up for: identity.device_id"),
            "{r}"
        );
        assert!(
            r.contains("Fix: put a token for this user and device"),
            "{r}"
        );
        assert_eq!(of("re-authenticate").map(|p| p.code), Some(REAUTHENTICATE));
        assert_eq!(
            of("re-authenticate: HTTP 401").map(|p| p.code),
            Some(REAUTHENTICATE)
        );
        assert_eq!(of("re-authenticated"), None);
        assert_eq!(explain("something new"), "something new");
    }

    /// The Troubleshooting page's table of pauses lists every row of [`PAUSES`]: its code, its words and
    /// its fix, on one line of the table.
    #[test]
    fn the_troubleshooting_page_lists_every_pause_with_its_fix() {
        let rows = rows();
        for p in PAUSES {
            let row = rows
                .iter()
                .find(|r| r.contains(&format!("paused: {}", p.code)))
                .unwrap_or_else(|| {
                    panic!(
                        "docs/troubleshooting.md has no row for the pause `{}`",
                        p.code
                    )
                });
            assert!(
                row.contains(&plain(p.words)),
                "`{}`: the words {:?} are not in {row:?}",
                p.code,
                p.words
            );
            assert!(
                row.contains(&plain(p.fix)),
                "`{}`: the fix {:?} is not in {row:?}",
                p.code,
                p.fix
            );
        }
    }
}
