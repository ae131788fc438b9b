//! Alerts as the API and the command line manage them: destinations ([`destinations`]), rules
//! ([`rules`]) and what fired ([`fired`]). Each operation takes the pool and a typed input, checks it
//! and answers a typed result or the one [`ApiError`]; authorization is the caller's (the routes check
//! the token's scope, the command line runs as the operator). See [`crate::alerts`].
//!
//! Bad input is a 400 (`invalid_alert`, naming the field); nothing is stored. Another tenant's or an
//! unknown id is a 404.

pub mod destinations;
pub mod fired;
pub mod rules;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::error::ApiError;

pub use destinations::{
    create_destination, delete_destination, destinations, CreatedDestination, DestinationBody,
    DestinationList, NewDestination,
};
pub use fired::{alerts, AlertBody, AlertList, AlertParams, NotificationBody};
pub use rules::{create_rule, delete_rule, rules, NewRule, RuleBody, RuleList};

/// A 400 `invalid_alert` with `message` (naming the field).
pub fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        code: "invalid_alert",
        message: message.into(),
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// Most destinations and rules a tenant keeps.
const MAX_PER_TENANT: i64 = 100;
