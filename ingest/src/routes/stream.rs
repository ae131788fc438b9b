//! `GET /v1/stream` (scope `read`): the live stream as Server-Sent Events — status transitions, sessions'
//! usage totals and device liveness of the token's tenant (and user, for a user-bound read token).
//! Resumable without gaps with `Last-Event-ID` (or `?after=`); see [`crate::stream`] for why.
//!
//! Events: `ready` first (its `id` is where the stream starts; nothing to apply), then `status`,
//! `usage`, `device` (data in [`StreamStatus`], [`StreamUsage`], [`StreamDevice`]); `reset` instead of
//! `ready` when the stream does not hold what followed the position asked for — older than it keeps, or
//! never given by this database (reload, then apply what follows), the agent's rule too. Only a
//! malformed position is a 400.
//! A comment line every 15 s keeps idle connections open. The token is only ever read from the
//! `Authorization` header, never from the URL.
//!
//! The body is written by hand rather than with `axum::response::sse`: each row is encoded once by the
//! replica's reader ([`StreamRow::sse`]) and shared, and the events ready at once go out in one write
//! (with a thousand subscribers, one write per event per subscriber cost two thirds of the ingest's
//! throughput on two cores: stream benchmark).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use utoipa::{IntoParams, ToSchema};

use super::docs::ReadErrors;
use super::extract::Query;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::stream::{self as reads, Start};
use crate::query::ReadDb;
use crate::stream::{encode, Cursor, Slot, StreamHub, StreamRow};

/// The `usage` event's data, shared with the agent's live stream; written in SQL
/// ([`crate::store::stream`]) and documented from this type.
pub use apiary_schema::status::StreamStatus;
pub use apiary_schema::usage::StreamUsage;

/// How often an idle stream sends a comment line.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// Most events one write carries.
const MAX_EVENTS_PER_WRITE: usize = 512;

/// The query string of `GET /v1/stream`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Resume after this position (an event's `id`, `xid-id`): the same as the `Last-Event-ID` header,
    /// which wins when both are sent.
    pub after: Option<String>,
}

/// `event: device`: a device heard from again (`online: true`) or silent for `offline_after_secs`
/// (`online: false`, within 5 s), the rule of `GET /v1/devices`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StreamDevice {
    pub device_id: String,
    pub online: bool,
    pub last_heard_at: Option<DateTime<Utc>>,
}

/// Server-Sent Events: `id:` the position (`xid-id`), `event:` `ready` | `reset` | `status` | `usage` |
/// `device`, `data:` JSON (`StreamStatus`, `StreamUsage`, `StreamDevice`; `{}` for ready and reset).
#[utoipa::path(
    get,
    path = "/v1/stream",
    params(StreamParams, ("Last-Event-ID" = Option<String>, Header, description = "Resume after this position: the `id` of the last event received.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "An endless text/event-stream; see StreamStatus, StreamUsage and StreamDevice for each event's data.", content_type = "text/event-stream", body = String),
        ReadErrors
    )
)]
pub async fn get_stream(
    State(db): State<ReadDb>,
    State(hub): State<Arc<StreamHub>>,
    reader: TenantRead,
    headers: HeaderMap,
    Query(params): Query<StreamParams>,
) -> Result<Response, ApiError> {
    let asked =
        match headers.get("last-event-id") {
            Some(v) => Some(v.to_str().ok().and_then(Cursor::parse).ok_or_else(|| {
                ApiError::BadRequest {
                    code: "invalid_cursor",
                    message: "Last-Event-ID must be the `id` of an event of this stream (xid-id)"
                        .into(),
                }
            })?),
            None => match params.after.as_deref() {
                Some(a) => Some(Cursor::parse(a).ok_or_else(|| {
                    ApiError::bad_param("after", "must be the `id` of an event (xid-id)")
                })?),
                None => None,
            },
        };
    // Subscribe before reading the backlog, so no row falls between the two.
    let sub = hub
        .subscribe(reader.tenant_id(), reader.user())
        .map_err(|full| ApiError::Busy(full.to_string()))?;
    let start = reads::start(&db, &reader, asked).await?;
    let (first, at) = match start {
        Start::After(at) => ("ready", at),
        Start::Reset { head } => ("reset", head),
    };
    let sub = Subscriber {
        db,
        reader,
        rows: sub.rows,
        _slot: sub.slot,
        stopped: hub.stopped(),
        at,
        pending: VecDeque::from([encode(first, &at.to_string(), "{}")]),
        catching_up: true,
        beat_at: Instant::now() + HEARTBEAT,
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

/// One open stream.
struct Subscriber {
    db: ReadDb,
    reader: TenantRead,
    /// Every replica-wide new row, from the hub.
    rows: broadcast::Receiver<Arc<StreamRow>>,
    /// Its place among the replica's open streams, given back when the stream is dropped.
    _slot: Slot,
    /// The server is stopping: end the stream.
    stopped: watch::Receiver<bool>,
    /// The last position sent: nothing at or before it is sent again.
    at: Cursor,
    /// Events read but not sent yet (at most one page).
    pending: VecDeque<Bytes>,
    /// Reading the table (the backlog, or after falling behind the channel) instead of the channel.
    catching_up: bool,
    /// When to send a comment line if nothing else was sent.
    beat_at: Instant,
}

impl Subscriber {
    fn sees(&self, row: &StreamRow) -> bool {
        row.tenant_id == self.reader.tenant_id()
            && self.reader.user().is_none_or(|u| u == row.user_id)
            && row.at > self.at
    }

    fn push(&mut self, row: &StreamRow) {
        self.at = row.at;
        self.pending.push_back(row.sse.clone());
    }

    /// The events read and not sent yet, as one write.
    fn take(&mut self) -> Option<Bytes> {
        let n = self.pending.len().min(MAX_EVENTS_PER_WRITE);
        if n <= 1 {
            return self.pending.pop_front();
        }
        let mut out = BytesMut::new();
        for b in self.pending.drain(..n) {
            out.extend_from_slice(&b);
        }
        Some(out.freeze())
    }

    /// Takes the rows the channel already holds (up to one write's worth) without waiting.
    fn drain_ready(&mut self) {
        while self.pending.len() < MAX_EVENTS_PER_WRITE {
            match self.rows.try_recv() {
                Ok(row) => {
                    if self.sees(&row) {
                        self.push(&row);
                    }
                }
                Err(TryRecvError::Lagged(_)) => {
                    self.catching_up = true;
                    return;
                }
                Err(TryRecvError::Empty | TryRecvError::Closed) => return,
            }
        }
    }

    /// The next write (one or more events, or a comment line); None ends the stream (server stopping,
    /// or the database failing: the client reconnects with its Last-Event-ID).
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.take() {
                self.beat_at = Instant::now() + HEARTBEAT;
                return Some(b);
            }
            if *self.stopped.borrow() {
                return None;
            }
            if self.catching_up {
                let rows = match reads::after(&self.db, &self.reader, self.at).await {
                    Ok(rows) => rows,
                    Err(e) => {
                        tracing::warn!(error = %e, "live stream: reading a backlog failed");
                        return None;
                    }
                };
                self.catching_up = rows.len() as i64 == crate::stream::PAGE;
                for r in &rows {
                    self.push(r);
                }
                continue;
            }
            tokio::select! {
                r = self.rows.recv() => match r {
                    Ok(row) => {
                        if self.sees(&row) {
                            self.push(&row);
                        }
                        self.drain_ready();
                    }
                    // Fell behind the channel: what was dropped is in the table.
                    Err(RecvError::Lagged(_)) => self.catching_up = true,
                    Err(RecvError::Closed) => return None,
                },
                _ = tokio::time::sleep_until(self.beat_at) => {
                    self.beat_at = Instant::now() + HEARTBEAT;
                    return Some(Bytes::from_static(b": keep-alive\n\n"));
                }
                _ = self.stopped.changed() => return None,
            }
        }
    }
}
