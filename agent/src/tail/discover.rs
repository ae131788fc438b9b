//! Finding the logs to follow under the Hive home. Blocking; called from `spawn_blocking`.
//!
//! - Per-session logs: `**/sessions/<session_id>/events.jsonl` at any depth (down to [`MAX_DEPTH`]
//!   directories), e.g. `queens/default/sessions/<id>/events.jsonl`. The session is the directory name; it
//!   becomes the `session_hint` of every line, because Hive omits `execution_id` on many queen-level events.
//! - The debug log (`HIVE_DEBUG_EVENTS=1`): `event_logs/*.jsonl` directly under the home. No session hint.
//!
//! Symbolic links are not followed (no loops, no escaping the home), nor are hidden directories and
//! `node_modules` (colony workspaces can be whole checkouts). A home that does not exist yet is empty:
//! Hive may simply not have run on the device so far.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// How many directories deep the walk goes below the home.
pub const MAX_DEPTH: usize = 8;

/// One log file to follow.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Source {
    /// The path relative to the home, `/`-separated: the checkpoint key, stable across home moves.
    pub key: String,
    /// The full path.
    pub path: PathBuf,
    /// The `<session_id>` directory of a per-session log; `None` for the debug log.
    pub session_hint: Option<String>,
}

/// Every log under `home`, sorted by key.
pub fn discover(home: &Path) -> io::Result<Vec<Source>> {
    let mut found = Vec::new();
    walk(home, |rel, name, path| {
        if let Some(source) = classify(rel, name, path) {
            found.push(source);
        }
    })?;
    found.sort();
    Ok(found)
}

/// Calls `visit(dir components below the home, file name, path)` for every regular file under `home`
/// (down to [`MAX_DEPTH`] directories; no symbolic links, hidden directories or `node_modules`). A home
/// that does not exist yet has no files; an unreadable subdirectory is skipped.
pub fn walk(home: &Path, mut visit: impl FnMut(&[String], &str, PathBuf)) -> io::Result<()> {
    let mut stack: Vec<(PathBuf, Vec<String>)> = vec![(home.to_path_buf(), Vec::new())];
    while let Some((dir, rel)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if rel.is_empty() && e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if rel.is_empty() => return Err(e),
            // A subdirectory that vanished or is unreadable is not worth stopping for.
            Err(_) => continue,
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            if kind.is_dir() {
                if rel.len() < MAX_DEPTH && !name.starts_with('.') && name != "node_modules" {
                    let mut child = rel.clone();
                    child.push(name);
                    stack.push((entry.path(), child));
                }
            } else if kind.is_file() {
                visit(&rel, &name, entry.path());
            }
        }
    }
    Ok(())
}

/// The session of a per-session log, `…/sessions/<session_id>/events.jsonl`: the directory's name. `None`
/// for any other file (and for a non-UTF-8 directory name: the session id is the directory's real name).
/// The tailer gives it to every line of the file as `session_hint`; `policy explain` does the same, so it
/// shows what the tailer would keep.
pub fn session_hint(path: &Path) -> Option<String> {
    let dir = path.parent()?;
    let sessions = dir.parent()?.file_name()?;
    (path.file_name()? == "events.jsonl" && sessions == "sessions")
        .then(|| dir.file_name()?.to_str().map(str::to_string))
        .flatten()
}

/// Whether the file `name` in the directory `rel` (components below the home) is a log to follow.
fn classify(rel: &[String], name: &str, path: PathBuf) -> Option<Source> {
    let key = rel
        .iter()
        .map(String::as_str)
        .chain([name])
        .collect::<Vec<_>>()
        .join("/");
    let session_hint = match rel {
        // `sessions/<id>` below the home (the hint's own rule does not know where the home is).
        [_, _, ..] if name == "events.jsonl" => Some(session_hint(&path)?),
        [dir] if dir == "event_logs" && name.ends_with(".jsonl") => None,
        _ => return None,
    };
    Some(Source {
        key,
        path,
        session_hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(home: &Path, rel: &str) {
        let path = home.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b"").unwrap();
    }

    #[test]
    fn finds_session_logs_at_any_depth_and_the_debug_log() {
        let home = tempfile::tempdir().unwrap();
        for rel in [
            "queens/default/sessions/session_a/events.jsonl",
            "sessions/session_b/events.jsonl",
            "x/y/z/sessions/session_c/events.jsonl",
            "event_logs/20261103_090000.jsonl",
            // Not logs Apiary follows:
            "queens/default/sessions/session_a/conversation.jsonl",
            "queens/default/sessions/events.jsonl",
            "queens/default/sessions/session_a/sub/events.jsonl",
            "event_logs/old/20261101_090000.jsonl",
            "event_logs/notes.txt",
            "other/20261103_090000.jsonl",
            ".cache/sessions/session_d/events.jsonl",
            "node_modules/sessions/session_e/events.jsonl",
        ] {
            touch(home.path(), rel);
        }
        let found = discover(home.path()).unwrap();
        let summary: Vec<(&str, Option<&str>)> = found
            .iter()
            .map(|s| (s.key.as_str(), s.session_hint.as_deref()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("event_logs/20261103_090000.jsonl", None),
                (
                    "queens/default/sessions/session_a/events.jsonl",
                    Some("session_a")
                ),
                ("sessions/session_b/events.jsonl", Some("session_b")),
                ("x/y/z/sessions/session_c/events.jsonl", Some("session_c")),
            ]
        );
        assert_eq!(found[1].path, home.path().join(&found[1].key));
    }

    #[test]
    fn a_home_that_does_not_exist_yet_is_empty() {
        let home = tempfile::tempdir().unwrap();
        assert!(discover(&home.path().join("missing")).unwrap().is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn symbolic_links_are_not_followed() {
        let home = tempfile::tempdir().unwrap();
        touch(home.path(), "real/sessions/s1/events.jsonl");
        std::os::unix::fs::symlink(home.path(), home.path().join("loop")).unwrap();
        let keys: Vec<String> = discover(home.path())
            .unwrap()
            .into_iter()
            .map(|s| s.key)
            .collect();
        assert_eq!(keys, vec!["real/sessions/s1/events.jsonl"]);
    }
}
