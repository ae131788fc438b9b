//! Device signing keys (`device_keys`): which Ed25519 key speaks for which device and user of a tenant.
//!
//! ## Rules
//! - A key is registered for one device (and its user, or none) by the device itself — `POST
//!   /v1/devices/key` with a token bound to that device, proving it holds the private key — or by an
//!   admin at the command line (`apiary-ingest device register`), for air-gapped devices that never
//!   reach the ingest.
//! - A device has at most one active key. Registering the key it already has changes nothing. Another key
//!   replaces it only when asked (`--replace`, admins only): the old key is revoked in the same
//!   transaction. A device never replaces its own key online: a stolen device token must not be enough to
//!   swap in the thief's key, so an agent whose key changed (a wiped data directory) needs an admin.
//! - A key belongs to one device of a tenant, and a revoked key is never accepted again (registering it
//!   anew is refused): revocation is final.
//! - Revocation (`device revoke`) takes effect for every import from then on, whatever the bundle's date
//!   (see [`crate::import`]): the dates inside a bundle are written by its signer, so a stolen key could
//!   backdate them.

use apiary_schema::device_key::PublicKey;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

/// Who registered a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisteredBy {
    /// The device, online, with a token bound to it.
    Device,
    /// An admin, at the command line.
    Admin,
}

impl RegisteredBy {
    fn as_str(self) -> &'static str {
        match self {
            RegisteredBy::Device => "device",
            RegisteredBy::Admin => "admin",
        }
    }
}

/// A stored key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct DeviceKey {
    /// `SHA256:…` of the key.
    pub fingerprint: String,
    /// `ed25519:…`.
    pub public_key: String,
    /// Null: a device bound to no user.
    pub user_id: Option<String>,
    pub device_id: String,
    /// `device` or `admin`.
    pub registered_by: String,
    pub registered_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// The row as stored (the key as bytes).
#[derive(sqlx::FromRow)]
struct Row {
    fingerprint: String,
    public_key: Vec<u8>,
    user_id: Option<String>,
    device_id: String,
    registered_by: String,
    registered_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<Row> for DeviceKey {
    fn from(r: Row) -> DeviceKey {
        let public_key = PublicKey::from_bytes(&r.public_key)
            .map(|k| k.to_text())
            .unwrap_or_else(|e| format!("(unreadable: {e})"));
        DeviceKey {
            fingerprint: r.fingerprint,
            public_key,
            user_id: r.user_id,
            device_id: r.device_id,
            registered_by: r.registered_by,
            registered_at: r.registered_at,
            revoked_at: r.revoked_at,
        }
    }
}

const COLUMNS: &str =
    "fingerprint, public_key, user_id, device_id, registered_by, registered_at, revoked_at";

/// Why a key was not registered or revoked.
#[derive(Debug, thiserror::Error)]
pub enum DeviceKeyError {
    #[error("key {fingerprint} was revoked at {revoked_at}; a revoked key is never accepted again: make a new one")]
    Revoked {
        fingerprint: String,
        revoked_at: DateTime<Utc>,
    },
    #[error("key {fingerprint} is already registered for device {device_id:?}{user}", user = .user_id.as_ref().map(|u| format!(" of user {u:?}")).unwrap_or_default())]
    OtherDevice {
        fingerprint: String,
        device_id: String,
        user_id: Option<String>,
    },
    #[error("device {device_id:?} already has key {fingerprint}; {how}")]
    DeviceHasKey {
        device_id: String,
        fingerprint: String,
        how: &'static str,
    },
    #[error("no active key matches")]
    NotFound,
    #[error("database query failed")]
    Query(#[from] sqlx::Error),
}

/// What [`register`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registered {
    /// Stored now; the key it replaced (revoked), if any.
    New {
        key: DeviceKey,
        replaced: Option<String>,
    },
    /// This device already had this key: nothing changed.
    Already(DeviceKey),
}

/// Registers `key` for `device` (of `user`) under the rules above. `replace` revokes the device's
/// other active key (admins only).
pub async fn register(
    pool: &PgPool,
    tenant_id: Uuid,
    user: Option<&str>,
    device: &str,
    key: &PublicKey,
    by: RegisteredBy,
    replace: bool,
) -> Result<Registered, DeviceKeyError> {
    let mut tx = pool.begin().await?;
    let fingerprint = key.fingerprint();
    let same: Option<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM device_keys WHERE tenant_id = $1 AND fingerprint = $2 FOR UPDATE"
    ))
    .bind(tenant_id)
    .bind(&fingerprint)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(row) = same {
        if let Some(revoked_at) = row.revoked_at {
            return Err(DeviceKeyError::Revoked {
                fingerprint,
                revoked_at,
            });
        }
        if row.device_id == device && row.user_id.as_deref() == user {
            return Ok(Registered::Already(row.into()));
        }
        return Err(DeviceKeyError::OtherDevice {
            fingerprint,
            device_id: row.device_id,
            user_id: row.user_id,
        });
    }
    let replaced = match active_of(&mut tx, tenant_id, device).await? {
        None => None,
        Some(old) if replace => {
            revoke_in(&mut tx, tenant_id, &old.fingerprint).await?;
            Some(old.fingerprint)
        }
        Some(old) => {
            return Err(DeviceKeyError::DeviceHasKey {
                device_id: device.to_string(),
                fingerprint: old.fingerprint,
                how: match by {
                    RegisteredBy::Device => {
                        "a device cannot replace its key itself: an admin registers the new one \
                         (apiary-ingest device register … --replace) after checking it"
                    }
                    RegisteredBy::Admin => {
                        "pass --replace to revoke it and register this one (or `device revoke` it first)"
                    }
                },
            })
        }
    };
    let row: Row = sqlx::query_as(&format!(
        "INSERT INTO device_keys (tenant_id, fingerprint, public_key, user_id, device_id, registered_by,
             registered_at) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(&fingerprint)
    .bind(&key.as_bytes()[..])
    .bind(user)
    .bind(device)
    .bind(by.as_str())
    .bind(Utc::now())
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Registered::New {
        key: row.into(),
        replaced,
    })
}

async fn active_of(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    device: &str,
) -> Result<Option<Row>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM device_keys WHERE tenant_id = $1 AND device_id = $2
           AND revoked_at IS NULL FOR UPDATE"
    ))
    .bind(tenant_id)
    .bind(device)
    .fetch_optional(&mut **tx)
    .await
}

async fn revoke_in(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    fingerprint: &str,
) -> Result<Option<Row>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE device_keys SET revoked_at = $3 WHERE tenant_id = $1 AND fingerprint = $2
           AND revoked_at IS NULL RETURNING {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(fingerprint)
    .bind(Utc::now())
    .fetch_optional(&mut **tx)
    .await
}

/// Which key to revoke.
#[derive(Debug, Clone)]
pub enum KeyRef {
    Fingerprint(String),
    /// The device's active key.
    Device(String),
}

/// Revokes an active key; returns it as now stored.
pub async fn revoke(
    pool: &PgPool,
    tenant_id: Uuid,
    which: &KeyRef,
) -> Result<DeviceKey, DeviceKeyError> {
    let mut tx = pool.begin().await?;
    let fingerprint = match which {
        KeyRef::Fingerprint(f) => f.trim().to_string(),
        KeyRef::Device(d) => {
            active_of(&mut tx, tenant_id, d)
                .await?
                .ok_or(DeviceKeyError::NotFound)?
                .fingerprint
        }
    };
    let row = revoke_in(&mut tx, tenant_id, &fingerprint)
        .await?
        .ok_or(DeviceKeyError::NotFound)?;
    tx.commit().await?;
    Ok(row.into())
}

/// The tenant's keys (revoked ones included), by device then registration time.
pub async fn list(pool: &PgPool, tenant_id: Uuid) -> Result<Vec<DeviceKey>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM device_keys WHERE tenant_id = $1 ORDER BY device_id, registered_at"
    ))
    .bind(tenant_id)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(DeviceKey::from).collect())
}

/// The key with this fingerprint, revoked or not.
pub async fn find(
    pool: &PgPool,
    tenant_id: Uuid,
    key: &PublicKey,
) -> Result<Option<DeviceKey>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM device_keys WHERE tenant_id = $1 AND fingerprint = $2 AND public_key = $3"
    ))
    .bind(tenant_id)
    .bind(key.fingerprint())
    .bind(&key.as_bytes()[..])
    .fetch_optional(pool)
    .await?;
    Ok(row.map(DeviceKey::from))
}
