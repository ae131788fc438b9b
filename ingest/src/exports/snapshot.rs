//! What one scrape or one push carries, read once for both forms: the usage rows (the counters), the
//! tool rows with their duration histograms, sessions by status and devices online — each read with the
//! same [`TenantRead`], so a user-bound token's scrape holds its user's series only, and each with the
//! definition of the API that serves it (`/v1/usage`, `/v1/usage?group_by=tool`, `/v1/sessions`,
//! `/v1/devices`).
//!
//! Labels: the counters carry every chosen dimension; the others carry the chosen dimensions they have
//! one value of — the duration histogram all but `model` (tool calls have none) plus the tool's name,
//! sessions `user`, `device` and `runtime` plus the status, devices `user` and `device`.

use chrono::{DateTime, Utc};

use super::MAX_LABEL_SETS;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::gauges::{self, Count, DEVICE_DIMS, SESSION_DIMS};
use crate::query::usage::{
    self, Dim, GroupBy, Part, TimeArg, UsageParams, UsageQuery, UsageRow, Within,
};
use crate::query::ReadDb;

/// Rows of one kind and the dimensions their keys are of, in order.
#[derive(Debug, Clone)]
pub struct Grouped<T> {
    pub dims: Vec<Dim>,
    pub rows: Vec<T>,
}

impl<T> Default for Grouped<T> {
    fn default() -> Self {
        Grouped {
            dims: vec![],
            rows: vec![],
        }
    }
}

/// Everything exported at one instant.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Usage over all time by the chosen dimensions: the counters.
    pub usage: Grouped<UsageRow>,
    /// Usage per tool over all time (the chosen dimensions but model, then the tool): the histogram.
    pub tools: Grouped<UsageRow>,
    /// Sessions by status now.
    pub sessions: Grouped<Count>,
    /// Devices online now.
    pub devices: Grouped<Count>,
}

async fn usage_rows(
    db: &ReadDb,
    reader: &TenantRead,
    dims: &[Dim],
    now: DateTime<Utc>,
) -> Result<Vec<UsageRow>, ApiError> {
    let params = UsageParams {
        from: Some(TimeArg::Instant(usage::all_time_from())),
        group_by: Some(GroupBy(dims.to_vec())),
        ..UsageParams::default()
    };
    let q = UsageQuery::from_params(params, now)?;
    usage::run(db, Within::Tenant(reader, &Part::Whole), &q).await
}

/// Refuses more than [`MAX_LABEL_SETS`] label sets of one metric, naming the count.
fn bounded<T>(what: &str, rows: &[T]) -> Result<(), ApiError> {
    if rows.len() > MAX_LABEL_SETS {
        return Err(ApiError::bad_param(
            "group_by",
            format!(
                "{} label sets of {what} exceed the bound of {MAX_LABEL_SETS}: choose fewer dimensions",
                rows.len()
            ),
        ));
    }
    Ok(())
}

impl Snapshot {
    /// Reads what `reader` may see, grouped by `dims` (of [`super::LABEL_DIMS`]), at `now`.
    pub async fn read(
        db: &ReadDb,
        reader: &TenantRead,
        dims: &[Dim],
        now: DateTime<Utc>,
    ) -> Result<Snapshot, ApiError> {
        let rows = usage_rows(db, reader, dims, now).await?;
        bounded("usage", &rows)?;
        let mut tool_dims: Vec<Dim> = dims.iter().copied().filter(|d| *d != Dim::Model).collect();
        tool_dims.push(Dim::Tool);
        let tools = usage_rows(db, reader, &tool_dims, now).await?;
        bounded("tool durations", &tools)?;
        let session_dims: Vec<Dim> = dims
            .iter()
            .copied()
            .filter(|d| SESSION_DIMS.contains(d))
            .collect();
        let sessions = gauges::sessions_by_status(db, reader, &session_dims, now).await?;
        bounded("sessions", &sessions)?;
        let device_dims: Vec<Dim> = dims
            .iter()
            .copied()
            .filter(|d| DEVICE_DIMS.contains(d))
            .collect();
        let devices = gauges::devices_online(db, reader, &device_dims, now).await?;
        bounded("devices", &devices)?;
        Ok(Snapshot {
            usage: Grouped {
                dims: dims.to_vec(),
                rows,
            },
            tools: Grouped {
                dims: tool_dims,
                rows: tools,
            },
            sessions: Grouped {
                dims: session_dims,
                rows: sessions,
            },
            devices: Grouped {
                dims: device_dims,
                rows: devices,
            },
        })
    }
}
