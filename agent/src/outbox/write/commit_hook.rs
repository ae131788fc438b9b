//! The writer's test hook between applying a group and committing it (cargo feature `test-hooks`, and
//! this crate's unit tests; never in a release build): a test parks the writer there to prove no
//! producer is answered before its commit. A leaf the writer calls; nothing in it reaches back.

use std::time::Duration;

/// The variable naming the marker file of [`park_before_commit`] (not `APIARY_*`: no setting of the
/// agent, and the agent's start-up checks of its own variables leave it alone).
pub const PARK_BEFORE_COMMIT_VAR: &str = "TEST_HOOK_APIARY_PARK_BEFORE_COMMIT";

/// Called by the writer thread between applying a group that writes events and committing it. When
/// [`PARK_BEFORE_COMMIT_VAR`] names a file that does not exist yet, the writer creates it and parks
/// there for good: the group is applied, not committed, and its producers unanswered, until a test
/// kills the process. Once per marker file (a restarted agent with the file present writes on).
pub(in crate::outbox) fn park_before_commit() {
    let Some(marker) = std::env::var_os(PARK_BEFORE_COMMIT_VAR) else {
        return;
    };
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker);
    if created.is_err() {
        return;
    }
    tracing::warn!("test hook: the outbox writer parks before its commit");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
