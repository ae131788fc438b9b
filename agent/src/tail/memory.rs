//! An in-memory [`TailSink`]: the stand-in for the outbox in the tailer's own tests (the real outbox is
//! tested on its own), also usable for dry runs. It records every commit and the latest checkpoint per
//! source, and can be told to fail commits, to show that the tailer retries the same lines and skips none.

use std::collections::BTreeMap;
use std::sync::Mutex;

use uuid::Uuid;

use super::sink::{Checkpoint, TailItem, TailSink};

/// One successful [`TailSink::commit`].
#[derive(Debug, Clone, PartialEq)]
pub struct Commit {
    pub items: Vec<TailItem>,
    pub checkpoint: Checkpoint,
}

/// A [`TailSink`] that keeps everything in memory.
#[derive(Debug, Default)]
pub struct MemorySink {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    commits: Vec<Commit>,
    checkpoints: BTreeMap<String, Checkpoint>,
    /// The next this-many commits fail.
    fail_next: usize,
    /// Once this many commits are stored, every further one fails (a store that went away).
    fail_after: Option<usize>,
}

impl MemorySink {
    pub fn new() -> MemorySink {
        MemorySink::default()
    }

    /// Every successful commit, in order.
    pub fn commits(&self) -> Vec<Commit> {
        self.lock().commits.clone()
    }

    /// Every item committed, in order.
    pub fn items(&self) -> Vec<TailItem> {
        self.lock()
            .commits
            .iter()
            .flat_map(|c| c.items.iter().cloned())
            .collect()
    }

    /// The ids of every kept event committed, in order, repeats included.
    pub fn kept_event_ids(&self) -> Vec<Uuid> {
        self.items()
            .iter()
            .filter_map(|item| item.kept_event().map(|event| event.event_id))
            .collect()
    }

    /// The latest checkpoint of a source.
    pub fn checkpoint(&self, source_key: &str) -> Option<Checkpoint> {
        self.lock().checkpoints.get(source_key).cloned()
    }

    /// Makes the next `n` commits fail (storing nothing).
    pub fn fail_next_commits(&self, n: usize) {
        self.lock().fail_next = n;
    }

    /// Makes every commit fail once `total` commits are stored; `None` lifts it.
    pub fn fail_commits_after(&self, total: Option<usize>) {
        self.lock().fail_after = total;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl TailSink for MemorySink {
    async fn commit(&self, items: Vec<TailItem>, checkpoint: Checkpoint) -> anyhow::Result<()> {
        let mut state = self.lock();
        if state.fail_next > 0 {
            state.fail_next -= 1;
            anyhow::bail!("memory sink told to fail this commit");
        }
        if state.fail_after.is_some_and(|n| state.commits.len() >= n) {
            anyhow::bail!(
                "memory sink told to fail commits after {}",
                state.commits.len()
            );
        }
        state
            .checkpoints
            .insert(checkpoint.source_key.clone(), checkpoint.clone());
        state.commits.push(Commit { items, checkpoint });
        Ok(())
    }

    async fn load_checkpoints(&self) -> anyhow::Result<Vec<Checkpoint>> {
        Ok(self.lock().checkpoints.values().cloned().collect())
    }
}
