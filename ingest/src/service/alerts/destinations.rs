//! Alert destinations: a webhook or Slack URL, checked at creation ([`crate::alerts::destination`]);
//! answered whole once, when created, then listed as host and fingerprint.

use chrono::{DateTime, Utc};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{invalid, rfc3339, MAX_PER_TENANT};
use crate::alerts::destination::{self, Kind};
use crate::error::ApiError;
use crate::store::alert_rules as store;

/// A destination to create.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewDestination {
    /// `webhook` (JSON, signed) or `slack` (an incoming-webhook URL).
    pub kind: String,
    /// `https://` and public (checked again after DNS resolution at each delivery).
    pub url: String,
    /// The webhook's HMAC key (16 to 200 characters); absent: one is made and answered once.
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// A destination as listed: where it sends and which URL, never the URL itself nor the secret (a Slack
/// webhook's URL is its only secret, and a webhook's URL often carries a token too).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DestinationBody {
    pub destination_id: String,
    pub kind: Kind,
    /// The URL's host, with its port when that is not the default.
    pub host: String,
    /// The first 12 hex digits of the SHA-256 of the URL as answered at creation
    /// (`printf %s "$URL" | sha256sum | cut -c1-12`): tells which URL it is without showing it.
    pub url_fingerprint: String,
    pub name: Option<String>,
    pub has_secret: bool,
    pub created_at: String,
}

impl DestinationBody {
    fn new(
        destination_id: String,
        kind: Kind,
        url: &str,
        name: Option<String>,
        has_secret: bool,
        created_at: DateTime<Utc>,
    ) -> DestinationBody {
        DestinationBody {
            destination_id,
            kind,
            host: destination::listed_host(url),
            url_fingerprint: destination::fingerprint(url),
            name,
            has_secret,
            created_at: rfc3339(created_at),
        }
    }
}

/// The answer that created a destination: as listed, plus what is shown this once and never again.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreatedDestination {
    #[serde(flatten)]
    pub destination: DestinationBody,
    /// The URL as stored (normalised; its fingerprint is the listing's `url_fingerprint`).
    pub url: String,
    /// Only when the server made the secret: keep it now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DestinationList {
    pub destinations: Vec<DestinationBody>,
}

/// Checks and stores a destination (the API's and the command line's one way in).
pub async fn create_destination(
    pool: &PgPool,
    tenant_id: Uuid,
    asked: NewDestination,
    allow_private: bool,
) -> Result<CreatedDestination, ApiError> {
    let kind = Kind::parse(&asked.kind)
        .ok_or_else(|| invalid(format!("kind: {:?} is not webhook or slack", asked.kind)))?;
    let url = destination::check_url(kind, asked.url.trim(), allow_private).map_err(invalid)?;
    if asked.name.as_ref().is_some_and(|n| n.chars().count() > 200) {
        return Err(invalid("name: at most 200 characters"));
    }
    let (secret, made) = match (kind, asked.secret) {
        (Kind::Slack, Some(_)) => {
            return Err(invalid(
                "secret: Slack webhooks are not signed (the URL is the secret)",
            ))
        }
        (Kind::Slack, None) => (None, false),
        (Kind::Webhook, Some(s)) if !(16..=200).contains(&s.len()) => {
            return Err(invalid("secret: 16 to 200 characters"))
        }
        (Kind::Webhook, Some(s)) => (Some(s), false),
        (Kind::Webhook, None) => {
            let mut b = [0u8; 32];
            rand::thread_rng().fill_bytes(&mut b);
            (Some(format!("whsec_{}", hex::encode(b))), true)
        }
    };
    let id = format!("ad_{}", Uuid::new_v4().simple());
    let row = store::NewDestination {
        destination_id: &id,
        kind: kind.as_str(),
        url: url.as_str(),
        secret: secret.as_deref(),
        name: asked.name.as_deref(),
    };
    let created = store::insert_destination(pool, tenant_id, row, MAX_PER_TENANT).await?;
    let Some(created_at) = created else {
        return Err(invalid(format!(
            "the tenant already has {MAX_PER_TENANT} destinations"
        )));
    };
    Ok(CreatedDestination {
        destination: DestinationBody::new(
            id,
            kind,
            url.as_str(),
            asked.name,
            secret.is_some(),
            created_at,
        ),
        url: url.to_string(),
        secret: if made { secret } else { None },
    })
}

/// The tenant's destinations, oldest first: host and URL fingerprint, never the URL nor the secret.
pub async fn destinations(pool: &PgPool, tenant_id: Uuid) -> Result<DestinationList, ApiError> {
    let rows = store::destinations(pool, tenant_id).await?;
    Ok(DestinationList {
        destinations: rows
            .into_iter()
            .filter_map(|d| {
                Some(DestinationBody::new(
                    d.destination_id,
                    Kind::parse(&d.kind)?,
                    &d.url,
                    d.name,
                    d.has_secret,
                    d.created_at,
                ))
            })
            .collect(),
    })
}

/// Deletes a destination; 400 while rules send to it, 404 when the tenant has no such destination or
/// a notification to it is still pending.
pub async fn delete_destination(pool: &PgPool, tenant_id: Uuid, id: &str) -> Result<(), ApiError> {
    let used = store::rules_sending_to(pool, tenant_id, id).await?;
    if used > 0 {
        return Err(invalid(format!(
            "{used} rule(s) send to this destination: delete them first"
        )));
    }
    if store::delete_destination(pool, tenant_id, id).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound("destination"))
    }
}
