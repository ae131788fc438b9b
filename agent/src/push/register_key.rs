//! Online registration of the device key: while sync is on, the agent registers its public key with the
//! ingest through the authenticated channel, `POST /v1/devices/key` with its push token.
//!
//! ## The rule (the ingest's side: `ingest/src/routes/device_keys.rs`)
//! - The device and user are the token's binding, never the agent's say: only a token bound to a device
//!   registers a key, and the body proves possession (the key's signature over the tenant, the token's
//!   device and the key; [`apiary_schema::device_key::registration_message`]).
//! - First registration wins; registering the same key again changes nothing. A device whose key changed
//!   (its data directory was wiped) is refused (409) and needs an admin (`apiary-ingest device register
//!   … --replace`), so a stolen device token is not enough to swap keys.
//!
//! ## When
//! In online mode, every [`CHECK_EVERY`] the agent looks at its sync target; for a target (endpoint and
//! token file) it has not settled yet it asks `GET /v1/whoami` (tenant and device) and registers. A
//! target is settled once the key is registered there, or the ingest said it will not be (a token bound
//! to no device, another key registered, an ingest without the route): that is logged once, with the
//! fix. An unreachable ingest is tried again after [`RETRY_AFTER`]. Air-gapped agents never open a
//! socket: an admin registers their key.

use std::path::Path;
use std::time::Duration;

use apiary_schema::device_key::{registration_message, KeyRegistration, SigningKey};
use secrecy::ExposeSecret;
use tokio_util::sync::CancellationToken;

use crate::outbox::Outbox;

/// How often the sync target is looked at.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);
/// How long after a failed attempt (ingest unreachable, 5xx) the next one is made.
pub const RETRY_AFTER: Duration = Duration::from_secs(300);

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// The ingest holds this key for this device now (`true`: it was stored by this attempt).
    Registered { new: bool },
    /// The ingest will not register it; the reason says what to do. Not retried for this target.
    Declined(String),
    /// Try again later.
    Failed(String),
}

/// Registers `key` with the ingest at `endpoint`, authenticated by the token in `token_file`.
pub async fn try_register(endpoint: &str, token_file: &Path, key: &SigningKey) -> Registration {
    let url = match super::target::batches_url(endpoint) {
        Ok(_) => format!("{}/v1/devices/key", endpoint.trim_end_matches('/')),
        Err(e) => return Registration::Declined(e.to_string()),
    };
    let whoami = match super::whoami::whoami(endpoint, token_file).await {
        Ok(w) => w,
        Err(e) => return Registration::Failed(e.to_string()),
    };
    let Some(device) = whoami.device_id else {
        return Registration::Declined(
            "the sync token is not bound to a device, so the device cannot register its key \
             itself: an admin registers it (`apiary-ingest device register … --public-key`, the key \
             `apiary-agent identity show` prints), or use a token made with --device"
                .into(),
        );
    };
    let public = key.public();
    let body = KeyRegistration {
        public_key: public.to_text(),
        proof: key.sign(&registration_message(&whoami.tenant_id, &device, &public)),
    };
    let token = match super::target::read_token(token_file) {
        Ok(t) => t,
        Err(e) => return Registration::Failed(e.to_string()),
    };
    let client = match super::http_client(Duration::from_secs(5), Duration::from_secs(10)) {
        Ok(c) => c,
        Err(e) => return Registration::Failed(e.to_string()),
    };
    let resp = client
        .post(&url)
        .bearer_auth(token.expose_secret())
        .json(&body)
        .send()
        .await;
    let resp = match resp {
        Ok(r) => r,
        Err(e) => return Registration::Failed(super::error_chain(&e)),
    };
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.pointer("/error/message")?.as_str().map(str::to_string))
        .unwrap_or(text);
    match status {
        201 => Registration::Registered { new: true },
        200 => Registration::Registered { new: false },
        404 | 405 => Registration::Declined(
            "the ingest does not take device keys (an older version): an admin registers the key"
                .into(),
        ),
        403 | 409 | 422 => Registration::Declined(format!("HTTP {status}: {message}")),
        _ => Registration::Failed(format!("HTTP {status}: {message}")),
    }
}

/// Registers the key with every sync target the outbox names, until `shutdown` (see the module notes).
pub async fn run_until_stopped(outbox: Outbox, key: SigningKey, shutdown: CancellationToken) {
    let fingerprint = key.public().fingerprint();
    // The target settled last (registered there, or declined), and when the last failure was.
    let mut settled: Option<(String, String)> = None;
    let mut failed: Option<((String, String), tokio::time::Instant)> = None;
    loop {
        if let Ok(sync) = outbox.sync_status().await {
            if let (true, Some(endpoint), Some(token_file)) =
                (sync.enabled, sync.endpoint, sync.token_file)
            {
                let target = (endpoint, token_file);
                let waiting = failed
                    .as_ref()
                    .is_some_and(|(t, at)| *t == target && at.elapsed() < RETRY_AFTER);
                if settled.as_ref() != Some(&target) && !waiting {
                    match try_register(&target.0, Path::new(&target.1), &key).await {
                        Registration::Registered { new } => {
                            tracing::info!(%fingerprint, endpoint = %target.0, new,
                                "the device key is registered with the ingest");
                            settled = Some(target);
                        }
                        Registration::Declined(why) => {
                            tracing::warn!(%fingerprint, endpoint = %target.0, "the device key was not registered: {why}");
                            settled = Some(target);
                        }
                        Registration::Failed(why) => {
                            tracing::warn!(%fingerprint, endpoint = %target.0, retry_in_secs = RETRY_AFTER.as_secs(),
                                "registering the device key failed: {why}");
                            failed = Some((target, tokio::time::Instant::now()));
                        }
                    }
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}
