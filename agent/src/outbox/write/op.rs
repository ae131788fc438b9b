//! The contract between the writer thread and the changes it applies.
//!
//! An [`Op`] is what the writer runs inside a group transaction. Most ops answer a caller: they are
//! written as a [`Task`] (apply → a value or a refusal) and wrapped in [`Replying`], the one adaptor that
//! keeps the answer and sends it once the group's fate is known. A failed group is retried op by op, so
//! `apply` may run twice: [`Replying`] forgets an earlier run's answer before every run, so no op has to.

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::outbox::error::OutboxError;
use crate::outbox::record::counters::Counter;
use crate::outbox::record::memory::{Delta, WriterState};
use crate::outbox::settings::OutboxSettings;

/// One change to the outbox, applied inside a group transaction.
pub(crate) trait Op: Send {
    /// Applies the op. May run more than once (a failed group is retried op by op).
    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<()>;
    /// Delivers the result once the group's fate is known (`Ok` = committed and durable). The op itself
    /// is dropped afterwards, off the writer thread (see [`super::writer::Reaper`]).
    fn finish(&mut self, committed: Result<(), OutboxError>);
    /// Events this op carries, for sizing groups.
    fn weight(&self) -> usize {
        1
    }
    /// True for the op that asks the writer to stop after this group.
    fn is_close(&self) -> bool {
        false
    }
    /// True for an op that writes events (what a full disk refuses first; see the writer's health).
    fn writes_events(&self) -> bool {
        false
    }
}

/// What an op can see and change.
pub(crate) struct Ctx<'a> {
    pub conn: &'a Connection,
    pub state: &'a WriterState,
    pub delta: &'a mut Delta,
    pub settings: &'a OutboxSettings,
    /// Unix milliseconds at the start of the group.
    pub now_ms: i64,
    /// Sync enabled, read at the start of the group (another process may have changed it).
    pub sync_enabled: bool,
}

impl Ctx<'_> {
    /// Adds `n` to a persisted counter (flushed at the end of the group).
    pub fn count(&mut self, counter: Counter, n: i64) {
        self.delta.count(counter, n);
    }

    /// The identity defaults in force: adopted earlier in this group, else the writer's.
    pub fn defaults(&self) -> &crate::identity::IdentityDefaults {
        self.delta.defaults.as_ref().unwrap_or(&self.state.defaults)
    }
}

/// An op that answers its caller with `Output`.
pub(crate) trait Task: Send + 'static {
    type Output: Send + 'static;
    /// Applies the change. `Err` fails the group (an SQL error); `Ok(Err(e))` refuses this op alone and
    /// lets the group commit (e.g. the cap is reached, a session conflicts).
    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<Result<Self::Output, OutboxError>>;
    /// Events this task carries, for sizing groups.
    fn weight(&self) -> usize {
        1
    }
    /// True for a task that writes events ([`Op::writes_events`]).
    const WRITES_EVENTS: bool = false;
}

/// The receiving end of a [`Replying`] op.
pub(crate) type Answer<T> = oneshot::Receiver<Result<T, OutboxError>>;

/// Adapts a [`Task`] to an [`Op`]: holds the answer of the latest run and its channel back.
pub(crate) struct Replying<T: Task> {
    task: T,
    /// The answer of the latest `apply`; reset before every run.
    answer: Option<Result<T::Output, OutboxError>>,
    tx: Option<oneshot::Sender<Result<T::Output, OutboxError>>>,
}

impl<T: Task> Replying<T> {
    pub fn new(task: T) -> (Replying<T>, Answer<T::Output>) {
        let (tx, rx) = oneshot::channel();
        let op = Replying {
            task,
            answer: None,
            tx: Some(tx),
        };
        (op, rx)
    }
}

impl<T: Task> Op for Replying<T> {
    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<()> {
        self.answer = None;
        self.answer = Some(self.task.apply(ctx)?);
        Ok(())
    }

    /// Sends the task's answer if the group committed, else the group's error.
    fn finish(&mut self, committed: Result<(), OutboxError>) {
        let answer =
            committed.and_then(|()| self.answer.take().unwrap_or(Err(OutboxError::Closed)));
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(answer);
        }
    }

    fn weight(&self) -> usize {
        self.task.weight()
    }
    fn writes_events(&self) -> bool {
        T::WRITES_EVENTS
    }
}
