//! Free space on the file system that holds the outbox.
//!
//! Read by `doctor` (to warn before the outbox refuses events) and by the writer (a tiny probe write
//! succeeding on an almost full disk does not mean events fit again). Unix only: elsewhere the space is
//! not read and callers treat it as unknown (untested on macOS and Windows).

use std::path::Path;

/// Below this much free space the outbox is about to refuse events: `doctor` calls it wrong, and after
/// a full disk the writer's probe does not call the outbox healthy again (a real write still does).
pub const LOW_FREE_BYTES: u64 = 64 << 20;

/// Bytes an unprivileged user may still write on `dir`'s file system, or `None` when not readable here.
#[cfg(unix)]
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(dir).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

/// Bytes an unprivileged user may still write on `dir`'s file system, or `None` when not readable here.
#[cfg(not(unix))]
pub fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}
