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
//! - A comment line every 15 s keeps an idle connection open.
//! - Bounds: at most [`MAX_STREAMS`] streams at once (503 + `Retry-After` beyond). Each stream reads at
//!   most one page of rows at a time, and only when the previous write was taken by the connection, so
//!   a reader that stops reading holds one page of memory and no more; it never slows the writer.
//! - Either token may read it; the token is read from the `Authorization` header only.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{ApiError, AppState};
use crate::outbox::{LivePosition, LiveStart, Outbox};

/// Most streams open at once.
pub const MAX_STREAMS: usize = 16;
/// How often an idle stream sends a comment line.
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
) -> Result<Response, ApiError> {
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
        pending: VecDeque::from([encode(first, &at.to_string(), "{}")]),
        epoch: at.epoch,
        at: at.id,
        beat_at: Instant::now() + KEEP_ALIVE,
        _permit: permit,
    };
    let body = futures::stream::unfold(sub, |mut s| async move {
        s.next().await.map(|b| (Ok::<_, Infallible>(b), s))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// One event in the `text/event-stream` format (the data is one line of JSON).
fn encode(kind: &str, id: &str, data: &str) -> Bytes {
    let data = data.replace(['\r', '\n'], " ");
    Bytes::from(format!("id: {id}\nevent: {kind}\ndata: {data}\n\n"))
}

/// One open stream.
struct Subscriber {
    outbox: Outbox,
    /// Bumped by the outbox writer after every commit.
    changes: watch::Receiver<u64>,
    stopped: CancellationToken,
    /// Events read and not sent yet (at most one page).
    pending: VecDeque<Bytes>,
    /// This outbox's stream epoch (the first half of every position).
    epoch: String,
    /// The last row id sent.
    at: i64,
    /// When to send a comment line if nothing else was sent.
    beat_at: Instant,
    /// Held while the stream is open (the cap).
    _permit: OwnedSemaphorePermit,
}

impl Subscriber {
    /// The next write (the events read, or a comment line); None ends the stream.
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if !self.pending.is_empty() {
                self.beat_at = Instant::now() + KEEP_ALIVE;
                let mut out = Vec::new();
                for b in self.pending.drain(..) {
                    out.extend_from_slice(&b);
                }
                return Some(Bytes::from(out));
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
                    self.pending.push_back(encode(&r.kind, &id, &r.data));
                }
                continue;
            }
            tokio::select! {
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                _ = tokio::time::sleep_until(self.beat_at) => {
                    self.beat_at = Instant::now() + KEEP_ALIVE;
                    return Some(Bytes::from_static(b": keep-alive\n\n"));
                }
                _ = self.stopped.cancelled() => return None,
            }
        }
    }
}
