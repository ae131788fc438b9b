//! Every problem `apiary-agent doctor` reports as wrong (`✗`), with its fix: one table, which doctor
//! fills in and the Troubleshooting page must carry (a test below checks each row against
//! `docs/troubleshooting.md`). A pause of sync has its own table ([`crate::push::pauses`]).
//!
//! `{name}` in a text marks what doctor fills in (a path, a number, a message); everything else is said
//! as written here.

use apiary_plumbing::doctor::Report;

/// One problem: what doctor says, and the fix it prints under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Problem {
    pub what: &'static str,
    pub fix: &'static str,
}

impl Problem {
    /// Reports the problem as wrong, its `{name}`s filled from `values`.
    pub fn report(&self, r: &mut Report, values: &[(&str, &str)]) {
        r.wrong(fill(self.what, values), fill(self.fix, values));
    }
}

/// `text` with each `{name}` of `values` replaced by its value.
fn fill(text: &str, values: &[(&str, &str)]) -> String {
    values.iter().fold(text.to_string(), |t, (name, value)| {
        t.replace(&format!("{{{name}}}"), value)
    })
}

pub const CONFIGURATION: Problem = Problem {
    what: "configuration: {error}",
    fix: "fix the key or variable named (every key: deploy/config/agent.toml)",
};
pub const NO_OUTBOX: Problem = Problem {
    what: "no outbox in {dir}",
    fix: "start the agent once: apiary-agent run --data-dir {dir}",
};
pub const UNBALANCED: Problem = Problem {
    what: "outbox counters do not add up (received ≠ the sum of outcomes)",
    fix: "a bug: please report it with `apiary-agent status --json`",
};
pub const OUTBOX_HEALTH: Problem = Problem {
    what: "outbox health: {state} {why}",
    fix: "free disk space for the data directory; the agent recovers by itself",
};
pub const NO_TOKEN_FILE_RECORDED: Problem = Problem {
    what: "sync is on but no token file is recorded",
    fix: "{enable}",
};
pub const NO_ENDPOINT_RECORDED: Problem = Problem {
    what: "sync is on but no endpoint is recorded",
    fix: "{enable}",
};
pub const LAST_PUSH_FAILED: Problem = Problem {
    what: "the last push failed: {error}",
    fix: "events are kept and retried with backoff; fix what the message names",
};
pub const LAST_PUSH_FAILED_PAUSED: Problem = Problem {
    what: "the last push failed: {error}",
    fix: "events are kept; nothing is sent while sync is paused (see above)",
};
pub const TOKEN_FILE_UNREADABLE: Problem = Problem {
    what: "token file {file}: {error}",
    fix: "write the ingest token (from `apiary-ingest token create`) to it, mode 0600",
};
pub const TOKEN_FILE_NOT_REGULAR: Problem = Problem {
    what: "token file {file} is not a regular file",
    fix: "write the ingest token to a regular file of your own, mode 0600",
};
pub const TOKEN_FILE_OPEN: Problem = Problem {
    what: "token file {file} is readable by others (mode {mode})",
    fix: "chmod 600 {file}",
};
pub const TOKEN_FILE_DACL: Problem = Problem {
    what: "token file {file} can be opened by {who}",
    fix: "icacls \"{file}\" /inheritance:r /grant:r \"%USERNAME%:F\"",
};
pub const TOKEN_FILE_OWNER: Problem = Problem {
    what: "token file {file} is owned by {owner}, not by you",
    fix: "write the token to a file of your own",
};
pub const TOKEN_FILE_PERMISSIONS: Problem = Problem {
    what: "token file {file}: cannot read its permissions: {error}",
    fix: "write the token to a file of your own, readable by you only",
};
pub const TOKEN_FILE_EMPTY: Problem = Problem {
    what: "token file {file} is empty",
    fix: "write the ingest token (from `apiary-ingest token create`) to it",
};
pub const ENDPOINT_REFUSED: Problem = Problem {
    what: "endpoint {endpoint} is refused: {why}",
    fix: "give the ingest's base URL (https://, or http:// to a loopback address for testing): {enable}",
};
pub const ENDPOINT_ROUTE: Problem = Problem {
    what: "endpoint {endpoint} ends in /v1/batches",
    fix: "give the base URL only; the agent appends /v1/batches",
};
pub const UNREACHABLE: Problem = Problem {
    what: "cannot reach {base}/healthz: {error}",
    fix: "check the endpoint URL, the network, and (for https) the certificate",
};
pub const CLOCK: Problem = Problem {
    what: "this clock is {skew} s off the ingest's",
    fix: "the ingest corrects batch times, but set the clock right (e.g. timedatectl set-ntp true)",
};
pub const NOT_AN_INGEST: Problem = Problem {
    what: "{base}/healthz does not answer as an Apiary ingest",
    fix: "the endpoint must be the ingest's base URL",
};
pub const TOKEN_REFUSED: Problem = Problem {
    what: "the ingest refused the token ({status}): it is unknown to this ingest, revoked, or mistyped",
    fix: "check the token in the token file, or create one with `apiary-ingest token create --tenant T \
          --scope ingest --user U --device D` and write it there",
};
pub const NO_INGEST_SCOPE: Problem = Problem {
    what: "the token lacks the `ingest` scope",
    fix: "create an ingest token: apiary-ingest token create --tenant T --scope ingest",
};
pub const OTHER_DEVICE: Problem = Problem {
    what: "this device is {mine} but the token is bound to device {bound}",
    fix: "set identity.device_id = {bound} in agent.toml, or use a token for this device",
};
pub const OTHER_USER: Problem = Problem {
    what: "identity.user_id is {mine} but the token is bound to user {bound}",
    fix: "set identity.user_id = {bound} or leave it out",
};
pub const DISK_FULL: Problem = Problem {
    what: "only {mib} MiB free on the data directory's disk: the outbox will refuse events",
    fix: "free disk space there, or move the data directory (--data-dir) to a larger disk",
};
pub const NO_HIVE_HOME: Problem = Problem {
    what: "hive_home {home} does not exist",
    fix: "point it at Hive's home (HIVE_HOME, usually ~/.hive)",
};

/// Every problem above.
pub const ALL: [Problem; 26] = [
    CONFIGURATION,
    NO_OUTBOX,
    UNBALANCED,
    OUTBOX_HEALTH,
    NO_TOKEN_FILE_RECORDED,
    NO_ENDPOINT_RECORDED,
    LAST_PUSH_FAILED,
    LAST_PUSH_FAILED_PAUSED,
    TOKEN_FILE_UNREADABLE,
    TOKEN_FILE_NOT_REGULAR,
    TOKEN_FILE_OPEN,
    TOKEN_FILE_DACL,
    TOKEN_FILE_OWNER,
    TOKEN_FILE_PERMISSIONS,
    TOKEN_FILE_EMPTY,
    ENDPOINT_REFUSED,
    ENDPOINT_ROUTE,
    UNREACHABLE,
    CLOCK,
    NOT_AN_INGEST,
    TOKEN_REFUSED,
    NO_INGEST_SCOPE,
    OTHER_DEVICE,
    OTHER_USER,
    DISK_FULL,
    NO_HIVE_HOME,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::pauses::page::{plain, rows};

    /// The parts of a text said as written: the pieces between its `{name}`s, trimmed, non-empty.
    fn literal_parts(text: &str) -> Vec<String> {
        let mut parts = vec![];
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            parts.push(rest[..open].to_string());
            rest = rest[open..].split_once('}').map_or("", |(_, r)| r);
        }
        parts.push(rest.to_string());
        parts
            .into_iter()
            .map(|p| plain(p.trim_matches(|c: char| c == ' ' || c == '"' || c == ':')))
            .filter(|p| p.len() > 2)
            .collect()
    }

    #[test]
    fn a_problem_is_filled_in_everywhere_its_names_occur() {
        let mut r = Report::default();
        TOKEN_FILE_OPEN.report(&mut r, &[("file", "/t/ingest.token"), ("mode", "644")]);
        let text = r.render();
        assert!(
            text.contains("token file /t/ingest.token is readable by others (mode 644)"),
            "{text}"
        );
        assert!(text.contains("chmod 600 /t/ingest.token"), "{text}");
        assert_eq!(
            literal_parts("{base}/healthz does not answer"),
            vec!["/healthz does not answer"]
        );
    }

    /// Each problem's words and its fix stand on one row of the Troubleshooting page's tables (with
    /// the page's own values, e.g. `F` for the file, where doctor fills one in).
    #[test]
    fn the_troubleshooting_page_lists_every_doctor_problem_with_its_fix() {
        let rows = rows();
        let mut missing = vec![];
        for p in ALL {
            let what = literal_parts(p.what);
            let fix = literal_parts(p.fix);
            let found = rows.iter().any(|row| {
                what.iter().all(|w| row.contains(w.as_str()))
                    && fix.iter().all(|f| row.contains(f.as_str()))
            });
            if !found {
                missing.push(format!("{:?} → {:?}", p.what, p.fix));
            }
        }
        assert!(
            missing.is_empty(),
            "docs/troubleshooting.md has no row with these doctor problems and their fixes:\n{}",
            missing.join("\n")
        );
    }
}
