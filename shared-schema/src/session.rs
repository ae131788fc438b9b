//! A session as both sides answer it: the ingest's `GET /v1/sessions`, `/v1/sessions/{id}` and trees, and
//! the agent's local listing and trees — one type ([`SessionBody`], in a tree [`TreeNode`] and
//! [`ColonyNode`]), so a client reads either with one parser. The agent fills what the device knows and
//! leaves null what it does not keep per session (colony, role, worker, runtime, phase, lifecycle, input
//! state, the last health signal; in a tree the colony's key, label and name). A colony's
//! `workers_by_status` is left out of the agent's trees: without agent roles the device cannot tell a
//! worker from another child, and an empty count would read "no workers".

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
#[cfg(feature = "openapi")]
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
#[cfg(feature = "openapi")]
use utoipa::openapi::RefOr;

use crate::status::{Durations, Status};
use crate::usage::UsageSums;
use crate::work::WorkSummary;

/// The schema of a status (its wire names).
#[cfg(feature = "openapi")]
pub fn status_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(Status::ALL.iter().map(|s| s.as_str())))
}

/// The schema of a status or null (the `from` of a first transition).
#[cfg(feature = "openapi")]
pub fn nullable_status_schema() -> ObjectBuilder {
    let names = Status::ALL
        .iter()
        .map(|s| serde_json::Value::from(s.as_str()));
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(names.chain([serde_json::Value::Null])))
}

/// The schema of `time_in_state`: seconds per status.
#[cfg(feature = "openapi")]
pub fn time_in_state_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("Seconds spent in each status, up to now."))
        .additional_properties(Some(RefOr::<Schema>::from(
            ObjectBuilder::new().schema_type(Type::Number).build(),
        )))
}

/// The schema of `below`: sessions per status.
#[cfg(feature = "openapi")]
pub fn below_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(
            "The sessions below this one (its colonies' runs and workers, at any depth), counted by \
             status at the time of the read; empty when nothing is below.",
        ))
        .additional_properties(Some(RefOr::<Schema>::from(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(0))
                .build(),
        )))
}

/// A session's clock: wall-clock and active time (the shared rule, [`crate::status::Durations`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DurationsBody {
    /// The session's first event; null for a session without events.
    pub started_at: Option<DateTime<Utc>>,
    /// When the session completed or failed (its latest execution completed/failed or worker
    /// finished); null while it is open.
    pub ended_at: Option<DateTime<Utc>>,
    /// From `started_at` to `ended_at`, or to now while open: a worker session's wall-clock, a queen's
    /// execution's.
    pub wall_clock_seconds: f64,
    /// Time in status `active` up to now (`time_in_state.active`).
    pub active_seconds: f64,
}

impl From<Durations> for DurationsBody {
    fn from(d: Durations) -> DurationsBody {
        DurationsBody {
            started_at: d.started_at,
            ended_at: d.ended_at,
            wall_clock_seconds: d.wall_clock_seconds,
            active_seconds: d.active_seconds,
        }
    }
}

/// The session's last health signal from the runtime.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HealthSignal {
    pub signal: Option<String>,
    pub at: Option<DateTime<Utc>>,
}

/// A session: identity, phase, derived status (the shared health model at the time of the read, the
/// device's liveness applied), lifecycle, last health signal, totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionBody {
    pub session_id: String,
    pub user_id: Option<String>,
    pub device_id: Option<String>,
    pub parent_session_id: Option<String>,
    pub colony_id: Option<String>,
    pub agent_role: Option<String>,
    pub worker_id: Option<String>,
    pub runtime: Option<String>,
    pub phase: Option<String>,
    #[cfg_attr(feature = "openapi", schema(schema_with = status_schema))]
    pub status: Status,
    /// When the current status began (null for a session with no events).
    pub status_since: Option<DateTime<Utc>>,
    pub status_cause: String,
    #[cfg_attr(feature = "openapi", schema(schema_with = time_in_state_schema))]
    pub time_in_state: BTreeMap<Status, f64>,
    /// Wall-clock and active time, up to now.
    pub durations: DurationsBody,
    /// The lifecycle the runtime reported (`running`, `completed`, ...).
    pub lifecycle: Option<String>,
    pub input_state: Option<String>,
    pub health: HealthSignal,
    pub first_seen_at: DateTime<Utc>,
    pub last_event_at: Option<DateTime<Utc>>,
    pub last_progress_at: Option<DateTime<Utc>>,
    pub device_last_heard_at: Option<DateTime<Utc>>,
    /// All-time usage (in a tree: of the session and everything below it), tool durations and active
    /// time as the usage rollups hold them included.
    pub totals: UsageSums,
    /// Task counts, next wake and activity (the shared work fold's summary).
    #[serde(flatten)]
    pub work: WorkSummary,
    /// The statuses of the sessions below it, counted: a queen that reads `completed` while a worker
    /// below is `stalled` says so here.
    #[cfg_attr(feature = "openapi", schema(schema_with = below_schema))]
    pub below: BTreeMap<Status, u64>,
}

/// A session in the tree: the session (its `totals` are of it and everything below), its own `usage`,
/// and its children grouped by colony.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TreeNode {
    #[serde(flatten)]
    pub session: SessionBody,
    /// The session's own usage.
    pub usage: UsageSums,
    pub colonies: Vec<ColonyNode>,
}

/// A colony below a session: its workers and their totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ColonyNode {
    /// The session the workers name as their colony (for a colony forked into its own session, that
    /// session); the parent's own id for children that name none.
    pub colony_id: String,
    /// The colony's key when `colony_id` is a run of a named colony (see `GET /v1/colonies`).
    pub colony_key: Option<String>,
    /// The label an admin gave the colony's key (`PUT /v1/colonies/{key}/label`), if any.
    pub colony_label: Option<String>,
    /// The colony's name, when its run carried it (a tenant that chose `names`, a consenting device).
    pub colony_name: Option<String>,
    /// The worker sessions below this colony (at any depth), counted by status.
    // None (left out) in the agent's trees: see the module notes. The ingest always fills it, so its
    // document keeps the field required.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = BTreeMap<String, u64>, required = true)
    )]
    pub workers_by_status: Option<BTreeMap<String, u64>>,
    pub totals: UsageSums,
    #[cfg_attr(feature = "openapi", schema(no_recursion))]
    pub workers: Vec<TreeNode>,
}
