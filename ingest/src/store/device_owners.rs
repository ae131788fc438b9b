//! Who may write a device's row (`devices`: liveness, backlog, agent version, drops).
//!
//! ## The rule
//! A device row belongs to one user: rows are keyed `(tenant_id, device_id, user_id)`, and a sender
//! writes only the row of its own user (`''` for a sender bound to no user). So:
//! - a token bound to a device writes the row of that device and the token's user, always: its device is
//!   its user's whatever anyone sent before;
//! - a sender not bound to a device (a token bound only to a user, or to nothing) names its device in
//!   `agent.device_id` and writes that device's row *of its own user*: two users who name the same id get
//!   a row each, and a read token bound to a user sees only its user's rows, so neither sees the other's
//!   heartbeats, backlog or version and neither hides the other's;
//! - a device id that a **binding** names — an unrevoked token bound to that device, or an unrevoked
//!   registered device key ([`super::device_keys`]) — for another user than the sender's is refused to
//!   a sender not bound to that device ([`check_sender`], 403 for the whole batch, before anything is
//!   stored): once alice's device is bound, nobody else's token can report as it;
//! - making a binding claims the id ([`claim`], run by `token create --device` and `device register`):
//!   rows other users made under that id without a binding of their own are removed (with their live
//!   stream state). Their sessions and usage stay theirs: a session belongs to its own first sender
//!   ([`super::owners`]).
//!
//! Heartbeats also carry the liveness of the sender's runtime sessions ([`super::runtime`]); a sender
//! bound to a user reports only on its user's sessions of that device.
//!
//! ## Concurrency
//! [`check_sender`] reads the bindings before the batch's transaction: a binding made while a batch of
//! another user is in flight does not stop that batch, and [`claim`] may run before it commits; the
//! next batch is refused. Rows are written in key order by [`super::devices::upsert`].

use sqlx::PgPool;
use uuid::Uuid;

use crate::error::ApiError;

/// Refuses (403) a sender not bound to `device` when a binding names it for another user (see the
/// module notes). A sender bound to the device, or a batch that names no device, passes untouched.
pub async fn check_sender(
    pool: &PgPool,
    tenant_id: Uuid,
    sender_user: Option<&str>,
    sender_device: Option<&str>,
    device: Option<&str>,
) -> Result<(), ApiError> {
    let Some(device) = device else { return Ok(()) };
    if sender_device == Some(device) {
        return Ok(());
    }
    let bound_elsewhere: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM api_tokens WHERE tenant_id = $1 AND device_id = $2
                        AND revoked_at IS NULL AND user_id IS DISTINCT FROM $3)
             OR EXISTS (SELECT 1 FROM device_keys WHERE tenant_id = $1 AND device_id = $2
                        AND revoked_at IS NULL AND user_id IS DISTINCT FROM $3)",
    )
    .bind(tenant_id)
    .bind(device)
    .bind(sender_user)
    .fetch_one(pool)
    .await?;
    if bound_elsewhere {
        return Err(ApiError::Forbidden(format!(
            "device {device:?} is bound to another user's token or key; only a token bound to this \
             device (or its user's) may report as it: use a token made with --device for this agent, \
             or another identity.device_id"
        )));
    }
    Ok(())
}

/// What [`claim`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// Users whose rows of the device were removed, sorted.
    pub users: Vec<String>,
}

/// Claims `device` for `user` (a binding was just made): removes the device's rows of other users
/// that no unrevoked binding of their own backs, and their live stream state (see the module notes).
pub async fn claim(
    pool: &PgPool,
    tenant_id: Uuid,
    device: &str,
    user: Option<&str>,
) -> Result<Claimed, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let mut users: Vec<String> = sqlx::query_scalar(
        "DELETE FROM devices d WHERE d.tenant_id = $1 AND d.device_id = $2 AND d.user_id <> COALESCE($3, '')
           AND NOT EXISTS (SELECT 1 FROM api_tokens t WHERE t.tenant_id = $1 AND t.device_id = $2
                           AND t.revoked_at IS NULL AND COALESCE(t.user_id, '') = d.user_id)
           AND NOT EXISTS (SELECT 1 FROM device_keys k WHERE k.tenant_id = $1 AND k.device_id = $2
                           AND k.revoked_at IS NULL AND COALESCE(k.user_id, '') = d.user_id)
         RETURNING d.user_id",
    )
    .bind(tenant_id)
    .bind(device)
    .bind(user)
    .fetch_all(&mut *tx)
    .await?;
    if !users.is_empty() {
        sqlx::query(
            "DELETE FROM stream_devices WHERE tenant_id = $1 AND device_id = $2 AND user_id = ANY($3)",
        )
        .bind(tenant_id)
        .bind(device)
        .bind(&users)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    users.sort();
    if !users.is_empty() {
        tracing::info!(%tenant_id, device, removed = ?users,
            "the device's binding removed other users' rows of it");
    }
    Ok(Claimed { users })
}
