//! `GET /v1/stream` on the agent: the local live stream for the desktop, Server-Sent Events with the
//! ingest's event names and data — `ready` (or `reset`) first, then `status` (a stored status transition:
//! `{session_id, seq, at, from, to, cause}`; a `seq` at or below one already seen replaces the history
//! from there) and `usage` (a session's usage totals, at most once a second per session) — read from the
//! outbox's `stream_log` ([`crate::outbox::LiveRow`]), so it works with sync off and air-gapped.
//!
//! - Positions are `<epoch>-<id>` (the `id:` of every event). Reconnecting with `Last-Event-ID` (or
//!   `?after=`) gets exactly the events after it, also across an agent restart (the log is in the
//!   outbox). A position this outbox no longer holds (pruned after 24 hours, ahead of the log, or from
//!   another outbox file) gets `event: reset` instead of `ready`: reload with the REST reads, then apply
//!   what follows. A malformed one is a 400.
//! - A comment line (`: keep-alive`) after 15 s without an event keeps an idle connection open.
//! - Framing is axum's [`Sse`]: one [`Event`] per row (`id`, `event`, then `data`, one line of JSON).
//! - Bounds: at most [`MAX_STREAMS`] streams at once (503 + `Retry-After` beyond). Each stream reads at
//!   most one page of rows at a time, and only when the connection has taken every event of the
//!   previous page, so a reader that stops reading holds one page of memory and no more; it never
//!   slows the writer.
//! - Either token may read it; the token is read from the `Authorization` header only.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use serde::Deserialize;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::{ApiError, AppState};
use crate::outbox::{LivePosition, LiveStart, Outbox};

/// Most streams open at once.
pub const MAX_STREAMS: usize = 16;
/// After how long without an event a stream sends a comment line.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Rows one read takes (and one write carries at most).
const PAGE: i64 = 256;

/// What the streams share: the cap and the stop signal.
#[derive(Debug)]
pub struct StreamHub {
    permits: Arc<Semaphore>,
    stopped: CancellationToken,
}

impl Default for StreamHub {
    fn default() -> StreamHub {
        StreamHub::new(MAX_STREAMS)
    }
}

impl StreamHub {
    pub fn new(max: usize) -> StreamHub {
        StreamHub {
            permits: Arc::new(Semaphore::new(max)),
            stopped: CancellationToken::new(),
        }
    }

    /// Ends every open stream (the agent is stopping: they would hold the graceful shutdown).
    pub fn stop(&self) {
        self.stopped.cancel();
    }
}

/// The query string of `GET /v1/stream`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    /// Resume after this position (the same as `Last-Event-ID`, which wins when both are sent).
    after: Option<String>,
}

fn parse_position(v: &str, what: &str) -> Result<LivePosition, ApiError> {
    LivePosition::parse(v).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "{what} must be the `id` of an event of this stream (<epoch>-<id>)"
        ))
    })
}

/// `GET /v1/stream`.
pub async fn get_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<StreamQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let asked = match headers.get("last-event-id") {
        Some(v) => Some(parse_position(v.to_str().unwrap_or(""), "Last-Event-ID")?),
        None => match q.after.as_deref() {
            Some(a) => Some(parse_position(a, "after")?),
            None => None,
        },
    };
    let permit = state
        .streams
        .permits
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyStreams { limit: MAX_STREAMS })?;
    // Watch for commits before reading where to start, so none falls between the two.
    let changes = state.outbox.live_changes();
    let (first, at) = match state.outbox.live_start(asked).await? {
        LiveStart::Ready(p) => ("ready", p),
        LiveStart::Reset(p) => ("reset", p),
    };
    let sub = Subscriber {
        outbox: state.outbox.clone(),
        changes,
        stopped: state.streams.stopped.clone(),
        pending: VecDeque::from([event(first, &at.to_string(), "{}")]),
        epoch: at.epoch,
        at: at.id,
        _permit: permit,
    };
    let events = futures::stream::unfold(sub, |mut s| async move {
        s.next().await.map(|e| (Ok::<_, Infallible>(e), s))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive")))
}

/// One event: `id`, `event`, and the data as one line of JSON (a line break in it becomes a space).
fn event(kind: &str, id: &str, data: &str) -> Event {
    Event::default()
        .id(id)
        .event(kind)
        .data(data.replace(['\r', '\n'], " "))
}

/// One open stream.
struct Subscriber {
    outbox: Outbox,
    /// Bumped by the outbox writer after every commit.
    changes: watch::Receiver<u64>,
    stopped: CancellationToken,
    /// Events read and not sent yet (at most one page).
    pending: VecDeque<Event>,
    /// This outbox's stream epoch (the first half of every position).
    epoch: String,
    /// The last row id sent.
    at: i64,
    /// Held while the stream is open (the cap).
    _permit: OwnedSemaphorePermit,
}

impl Subscriber {
    /// The next event (the keep-alive comments are [`Sse`]'s); None ends the stream.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.stopped.is_cancelled() {
                return None;
            }
            // Seen before reading: a commit after this point wakes the wait below.
            self.changes.borrow_and_update();
            let rows = match self.outbox.live_after(self.at, PAGE).await {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(error = %e.detailed(), "local live stream: reading the log failed");
                    return None;
                }
            };
            if !rows.is_empty() {
                for r in rows {
                    self.at = r.id;
                    let id = format!("{}-{}", self.epoch, r.id);
                    self.pending.push_back(event(&r.kind, &id, &r.data));
                }
                continue;
            }
            tokio::select! {
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                _ = self.stopped.cancelled() => return None,
            }
        }
    }
}
