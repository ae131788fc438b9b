//! A full disk is an error state that is reported and recovered from: never a crash, never a corrupt
//! file, never a lost acknowledged event. Simulated two ways: SQLite's `max_page_count` (SQLITE_FULL,
//! always available), and a real 2 MiB tmpfs (ENOSPC; needs root, skipped otherwise).

mod support;

use std::path::{Path, PathBuf};

use apiary_agent::outbox::{Outbox, OutboxError, OutboxSettings, SyncChange};

/// Submits batches of 50 until one fails; returns how many were acknowledged and the error.
async fn fill(outbox: &Outbox, from: u128) -> (u64, OutboxError) {
    let mut n = from;
    loop {
        let items = (n..n + 50).map(support::event).collect();
        match outbox.submit(items).await {
            Ok(r) => {
                assert_eq!(r.accepted, 50);
                n += 50;
            }
            Err(e) => return ((n - from) as u64, e),
        }
        assert!(n < from + 1_000_000, "never filled up");
    }
}

fn integrity(path: &Path) -> String {
    let conn = apiary_agent::outbox::store::open_reader(path).unwrap();
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn sqlite_full_is_reported_and_recovered_from() {
    let dir = tempfile::tempdir().unwrap();
    let settings = OutboxSettings {
        sqlite_max_page_count: Some(256),
        ..OutboxSettings::default()
    };
    let outbox = support::open(dir.path(), settings);
    let (acked, err) = fill(&outbox, 0).await;
    assert_eq!(err, OutboxError::DiskFull);
    assert!(err.is_retryable() && err.retry_after().is_some());
    let health = outbox.health();
    assert_eq!(health.state, "disk_full");
    assert!(health.since.is_some() && health.last_error.is_some());
    let st = outbox.status().await.unwrap();
    assert_eq!(
        st.stored.pending_events, acked,
        "acknowledged events are all there"
    );
    assert!(st.stored.balanced);
    // Free space: purge the backlog (an UPDATE that shrinks rows), then writes work again.
    outbox
        .set_sync(SyncChange::Disable { purge: true })
        .await
        .unwrap();
    assert_eq!(outbox.health().state, "ok");
    let rep = outbox
        .submit(vec![support::event(9_999_999)])
        .await
        .unwrap();
    assert_eq!(rep.accepted, 1);
    outbox.close().await;
    assert_eq!(integrity(&dir.path().join("outbox.db")), "ok");
}

/// A tmpfs mount that is unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?.keep();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .ok()?
            .success();
        ok.then_some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[tokio::test]
async fn a_really_full_filesystem_is_reported_and_recovered_from() {
    let Some(fs) = Tmpfs::mount("2m") else {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    };
    let outbox = support::open(&fs.0, OutboxSettings::default());
    // Leave a little room, held by a file we can delete later.
    let filler = fs.0.join("filler");
    std::fs::write(&filler, vec![0u8; 256 * 1024]).unwrap();
    let (acked, err) = fill(&outbox, 0).await;
    assert_eq!(err, OutboxError::DiskFull, "ENOSPC surfaces as a full disk");
    assert_eq!(outbox.health().state, "disk_full");
    let (_, again) = fill(&outbox, 5_000_000).await;
    assert_eq!(again, OutboxError::DiskFull, "still full, still no crash");
    std::fs::remove_file(&filler).unwrap();
    let rep = outbox
        .submit(vec![support::event(9_999_999)])
        .await
        .unwrap();
    assert_eq!(rep.accepted, 1, "writes resume once space is back");
    assert_eq!(outbox.health().state, "ok");
    let st = outbox.status().await.unwrap().stored;
    assert_eq!(st.pending_events, acked + 1);
    assert!(st.balanced);
    outbox.close().await;
    assert_eq!(integrity(&fs.0.join("outbox.db")), "ok");
}
