//! `POST /v1/devices/key` (scope `ingest`, a token bound to a device): an online agent registers its
//! device signing key, so that bundles it exports later import as its device without an admin.
//!
//! The rule (see [`crate::store::device_keys`] for the rest):
//! - the device and its user are the token's binding, never the body's: a token bound to no device is
//!   refused (403), and an admin registers such devices' keys (`apiary-ingest device register`);
//! - the body proves possession: `proof` is the key's signature of
//!   [`apiary_schema::device_key::registration_message`] (this tenant, the token's device, the key), so a
//!   key cannot be registered by someone who does not hold it, nor a proof replayed for another tenant
//!   or device (422 when it does not verify);
//! - first registration wins: the same key again answers 200 and changes nothing; another key for a
//!   device that has one, or a key registered for another device, or a revoked key, is 409 — a stolen
//!   device token is not enough to swap keys; an admin rotates them (`device register --replace`).

use apiary_schema::device_key::{registration_message, KeyRegistration, PublicKey};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::docs::{AuthErrors, KeyRegistrationBody};
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::device_keys::{self, DeviceKey, DeviceKeyError, Registered, RegisteredBy};

fn invalid(message: String) -> ApiError {
    ApiError::Invalid {
        message,
        details: vec![],
    }
}

/// Registers the token's device's signing key (see the module notes). 201 when stored, 200 when the
/// device already had this key; 403 for a token bound to no device; 409 when the device has another key,
/// the key is another device's, or it was revoked; 422 when the key or its proof is malformed or does not
/// verify.
#[utoipa::path(
    post,
    path = "/v1/devices/key",
    request_body(content = KeyRegistrationBody, content_type = "application/json"),
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Registered.", body = DeviceKey),
        (status = 200, description = "The device already had this key.", body = DeviceKey),
        AuthErrors
    )
)]
pub async fn post_device_key(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<(StatusCode, Json<DeviceKey>), ApiError> {
    principal.require(Scope::Ingest)?;
    let device = principal.device_id.as_deref().ok_or_else(|| {
        ApiError::Forbidden(
            "registering a device key needs a token bound to a device (token create --device D); \
             an admin registers other devices' keys with `apiary-ingest device register`"
                .into(),
        )
    })?;
    let asked: KeyRegistration = serde_json::from_slice(&body)
        .map_err(|e| invalid(format!("the body is not a key registration: {e}")))?;
    let key = PublicKey::parse(&asked.public_key).map_err(|e| invalid(e.to_string()))?;
    let message = registration_message(&principal.tenant_id.to_string(), device, &key);
    key.verify(&message, &asked.proof).map_err(|e| {
        invalid(format!(
            "proof refused: {e} (it must sign this tenant, the token's device and the key)"
        ))
    })?;
    let user = principal.user_id.as_deref();
    let registered = device_keys::register(
        &state.pool,
        principal.tenant_id,
        user,
        device,
        &key,
        RegisteredBy::Device,
        false,
    )
    .await
    .map_err(conflict)?;
    match registered {
        Registered::New { key, .. } => {
            tracing::info!(tenant = %principal.tenant_id, device, fingerprint = %key.fingerprint,
                "device key registered by the device");
            Ok((StatusCode::CREATED, Json(key)))
        }
        Registered::Already(key) => Ok((StatusCode::OK, Json(key))),
    }
}

fn conflict(e: DeviceKeyError) -> ApiError {
    match e {
        DeviceKeyError::Query(q) => q.into(),
        other => ApiError::Conflict(other.to_string()),
    }
}
