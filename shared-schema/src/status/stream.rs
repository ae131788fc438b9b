//! The live streams' `status` event data ([`StreamStatus`]): the ingest's `GET /v1/stream` and the agent's
//! local one send the same fields, so a client reads either with one parser. The ingest writes it in SQL
//! (encoded once for every subscriber); this type is what that SQL must produce and what its OpenAPI
//! document shows. The agent serialises it from the transition its health fold stores.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Status, Transition};

/// `event: status`: a stored status transition. `seq` numbers the session's history from 0; a `seq` at
/// or below one already seen replaces the history from there (a late event rewrote it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamStatus {
    pub session_id: String,
    pub seq: i64,
    pub at: DateTime<Utc>,
    /// Null for the session's first.
    pub from: Option<String>,
    pub to: String,
    pub cause: String,
}

impl StreamStatus {
    /// The event for `session`'s transition `t`.
    pub fn of(session: &str, t: &Transition) -> StreamStatus {
        StreamStatus {
            session_id: session.to_string(),
            seq: i64::try_from(t.seq).unwrap_or(i64::MAX),
            at: t.at,
            from: t.from.map(|s| Status::as_str(s).to_string()),
            to: t.to.as_str().to_string(),
            cause: t.cause.clone(),
        }
    }
}
