//! A session's work as the API answers it: the compact form in every [`super::SessionBody`] (task counts,
//! `next_wake_at`, the activity) and the lists in the session detail ([`super::detail::SessionDetail`]).
//! The rule and the types are the shared ones ([`apiary_schema::work`], with their OpenAPI schema from
//! its `openapi` feature); this reads the stored work.

use apiary_schema::work::Work;
use serde_json::Value;

/// The stored work (`sessions.work`); empty when absent or unreadable.
pub fn stored(v: Option<&Value>) -> Work {
    v.and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}
