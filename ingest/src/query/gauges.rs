//! Counts of now, for the exported gauges ([`crate::exports`]): sessions by status and devices online,
//! each with the definition the API serves, so a gauge and the listing read at the same instant agree.
//!
//! - **Sessions by status**: every session the reader may see (the rows `GET /v1/sessions` pages
//!   through, read in chunks of [`CHUNK`] with the listing's own statement), each with its status
//!   derived at `now` exactly as the listing and `GET /v1/sessions/{id}` derive it
//!   ([`SessionRow::view`]: the health model, time let pass, the device's liveness).
//! - **Devices online**: the devices `GET /v1/devices` lists for the reader, counted where its
//!   `online` is true (heard from within `offline_after_secs`).
//!
//! Each count carries the keys of the dimensions it is grouped by; every status (or "online") is
//! answered for every group that has a session (a device), zeros included, so a status that emptied
//! reads 0 instead of keeping its last value in a backend.

use std::collections::BTreeMap;

use apiary_schema::status::Status;
use chrono::{DateTime, Utc};

use super::sessions::list::{page_query, Cursor, ListFilter};
use super::sessions::SessionRow;
use super::usage::Dim;
use super::{devices, ReadDb};
use crate::access::TenantRead;
use crate::error::ApiError;

/// Sessions read per statement.
const CHUNK: usize = 1000;

/// One group's count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Count {
    /// The key of each dimension asked for, in that order ("" for none).
    pub keys: Vec<String>,
    /// The status counted (sessions by status), or None (devices online).
    pub status: Option<Status>,
    pub value: i64,
}

/// The dimensions a session's count can be grouped by: those a session row has one value of.
pub const SESSION_DIMS: [Dim; 3] = [Dim::User, Dim::Device, Dim::Runtime];
/// The dimensions a device's count can be grouped by.
pub const DEVICE_DIMS: [Dim; 2] = [Dim::User, Dim::Device];

fn session_key(s: &SessionRow, d: Dim) -> String {
    match d {
        Dim::User => s.user_id.clone(),
        Dim::Device => s.device_id.clone(),
        Dim::Runtime => s.runtime.clone().unwrap_or_default(),
        _ => String::new(),
    }
}

/// The reader's sessions by their status at `now`, grouped by `dims` (of [`SESSION_DIMS`]; others are
/// ignored): every status for every group that has a session, sorted by keys then status.
pub async fn sessions_by_status(
    db: &ReadDb,
    r: &TenantRead,
    dims: &[Dim],
    now: DateTime<Utc>,
) -> Result<Vec<Count>, ApiError> {
    let dims: Vec<Dim> = dims
        .iter()
        .copied()
        .filter(|d| SESSION_DIMS.contains(d))
        .collect();
    let filter = ListFilter::default();
    let mut groups: BTreeMap<Vec<String>, BTreeMap<Status, i64>> = BTreeMap::new();
    let mut after: Option<Cursor> = None;
    loop {
        let rows: Vec<SessionRow> = page_query(r, &filter, after.as_ref(), CHUNK, None)
            .build_query_as()
            .fetch_all(&db.pool)
            .await?;
        for s in &rows {
            let keys = dims.iter().map(|d| session_key(s, *d)).collect();
            let status = s.view(now, &db.rules).status;
            *groups.entry(keys).or_default().entry(status).or_default() += 1;
        }
        if rows.len() < CHUNK {
            break;
        }
        after = rows.last().map(Cursor::of);
    }
    Ok(groups
        .into_iter()
        .flat_map(|(keys, counts)| {
            Status::ALL.into_iter().map(move |status| Count {
                keys: keys.clone(),
                status: Some(status),
                value: counts.get(&status).copied().unwrap_or(0),
            })
        })
        .collect())
}

/// The reader's devices online at `now` (as `GET /v1/devices` says), grouped by `dims` (of
/// [`DEVICE_DIMS`]; others are ignored): one count for every group that has a device, sorted by keys.
pub async fn devices_online(
    db: &ReadDb,
    r: &TenantRead,
    dims: &[Dim],
    now: DateTime<Utc>,
) -> Result<Vec<Count>, ApiError> {
    let listed = devices::list(db, r, now).await?;
    let mut groups: BTreeMap<Vec<String>, i64> = BTreeMap::new();
    for d in &listed.devices {
        let keys = dims
            .iter()
            .filter(|x| DEVICE_DIMS.contains(x))
            .map(|x| match x {
                Dim::User => d.user_id.clone().unwrap_or_default(),
                _ => d.device_id.clone(),
            })
            .collect();
        *groups.entry(keys).or_default() += i64::from(d.online);
    }
    Ok(groups
        .into_iter()
        .map(|(keys, value)| Count {
            keys,
            status: None,
            value,
        })
        .collect())
}
