//! Alerts: rules that fire on a budget threshold crossed, a session in a bad status for a while, a device
//! offline or with a backlog, and a device gone silent after recent working days; and the notifications
//! they send to webhooks and Slack, each exactly once.
//!
//! - **Rules** ([`evaluate`]) are evaluated every `alerts.evaluate_secs` by every replica; a tenant's
//!   rules by one replica at a time (a transaction-scoped advisory lock, `pg_try_advisory_xact_lock`).
//!   What fired is an alert row keyed by `(rule, episode)` — the budget's threshold in a period, the
//!   session's stretch in a status (the time it entered it), the device's silence since its last word —
//!   so an episode fires once however often it is seen, and a new episode fires again. An alert
//!   resolves when its condition ends (the period is over, the session moved on, the device spoke).
//! - **Notifications** are rows of an outbox written in the same transaction as the alert's change
//!   (`firing`, `resolved`), with an idempotency key (`<alert id>:<event>`) in the payload. Replicas
//!   claim due rows with `FOR UPDATE SKIP LOCKED` and a lease ([`deliver`]), send, and record the
//!   outcome only if they still hold the lease; a failure is retried with exponential backoff and full
//!   jitter (`Retry-After` honoured as a floor), up to `alerts.max_attempts`, then the row is `dead`.
//!   A replica that dies mid-send lets its lease lapse and another sends it again: the receiver sees
//!   the same idempotency key, which is how "exactly once" survives a crash between the receiver's
//!   answer and our record of it.
//! - **Destinations** ([`destination`]) are `https://` and public ([`address`]: IANA's special-purpose
//!   registries), checked at creation and again after DNS resolution at each delivery, the request
//!   pinned to the checked addresses and never sent through the environment's proxy (only through
//!   `alerts.egress_proxy` when the operator sets one); redirects are not followed. A destination's URL
//!   is answered once, at creation, then listed as host and fingerprint. Webhook bodies are signed:
//!   `X-Apiary-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.

pub mod address;
pub mod deliver;
pub mod destination;
pub mod evaluate;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;

use crate::config::AlertSettings;
use crate::query::ReadDb;

pub use apiary_schema::alert::RuleKind;

/// Runs the rule evaluator and the notification deliverer until the process stops (both in this task,
/// so aborting it stops both).
pub async fn run(pool: PgPool, db: ReadDb, settings: AlertSettings, offline_after_secs: i64) {
    let settings = Arc::new(settings);
    let evaluator = async {
        let mut tick = tokio::time::interval(Duration::from_secs(settings.evaluate_secs));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = evaluate::all(&pool, &db, offline_after_secs).await {
                tracing::warn!(error = %e, "alert evaluation failed; retrying on the next round");
            }
        }
    };
    tokio::join!(evaluator, deliver::run(pool.clone(), settings.clone()));
}
