//! Tenants and tokens (the `tenant create`, `tenant set`, `token create`, `operator-token create` and
//! `token revoke` commands; a tenant's settings for `GET`/`PUT /v1/tenant/settings`). Operator tokens
//! are made here and nowhere else: no route creates a token of any kind.

use apiary_schema::colony::ColonyNames;
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::{generate_operator_token, generate_token, hash_token, Scope};

/// Why a tenant or token could not be created.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("tenant {0} does not exist")]
    NoSuchTenant(String),
    #[error("{0}")]
    Invalid(String),
    #[error("database query failed")]
    Query(#[from] sqlx::Error),
}

/// Creates a tenant; returns its id.
pub async fn create_tenant(pool: &PgPool, name: &str) -> Result<Uuid, AdminError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(AdminError::Invalid(
            "the tenant name must have 1 to 200 characters".into(),
        ));
    }
    let id = Uuid::new_v4();
    sqlx::query("INSERT INTO tenants (tenant_id, name) VALUES ($1, $2)")
        .bind(id)
        .bind(name)
        .execute(pool)
        .await?;
    Ok(id)
}

/// A tenant's settings (its `tenants` row).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantSettings {
    /// Whether colony names may leave consenting devices (see `apiary_schema::colony`).
    pub colony_names: ColonyNames,
}

/// The tenant's settings.
pub async fn tenant_settings(pool: &PgPool, tenant_id: Uuid) -> Result<TenantSettings, AdminError> {
    let names: Option<String> =
        sqlx::query_scalar("SELECT colony_names FROM tenants WHERE tenant_id = $1")
            .bind(tenant_id)
            .fetch_optional(pool)
            .await?;
    let names = names.ok_or_else(|| AdminError::NoSuchTenant(tenant_id.to_string()))?;
    Ok(TenantSettings {
        colony_names: ColonyNames::parse(&names).unwrap_or_default(),
    })
}

/// Sets the tenant's colony names choice; returns the settings now in force. Tokens already verified
/// follow within `token_cache_secs`; devices learn it from `GET /v1/whoami`.
pub async fn set_colony_names(
    pool: &PgPool,
    tenant_id: Uuid,
    names: ColonyNames,
) -> Result<TenantSettings, AdminError> {
    let done = sqlx::query("UPDATE tenants SET colony_names = $2 WHERE tenant_id = $1")
        .bind(tenant_id)
        .bind(names.as_str())
        .execute(pool)
        .await?;
    if done.rows_affected() == 0 {
        return Err(AdminError::NoSuchTenant(tenant_id.to_string()));
    }
    tracing::info!(%tenant_id, colony_names = names.as_str(), "tenant colony names set");
    tenant_settings(pool, tenant_id).await
}

/// What a new token is bound to.
#[derive(Debug, Clone)]
pub struct TokenSpec {
    /// A tenant id, or the name of exactly one tenant.
    pub tenant: String,
    pub scopes: Vec<Scope>,
    pub user_id: Option<String>,
    pub device_id: Option<String>,
}

/// Creates a token; returns (token id, the token). The token itself is not stored. A token bound to a
/// device claims the device for its user ([`super::device_owners::claim`]).
pub async fn create_token(pool: &PgPool, spec: &TokenSpec) -> Result<(Uuid, String), AdminError> {
    if spec.scopes.is_empty() {
        return Err(AdminError::Invalid(
            "at least one scope is needed (ingest, read, admin)".into(),
        ));
    }
    for id in [&spec.user_id, &spec.device_id].into_iter().flatten() {
        if !apiary_schema::policy::is_id(id) {
            return Err(AdminError::Invalid(format!("{id:?} is not a valid id")));
        }
    }
    let tenant_id = resolve_tenant(pool, &spec.tenant).await?;
    let token = generate_token();
    let token_id = Uuid::new_v4();
    let scopes: Vec<&str> = spec.scopes.iter().map(|s| s.as_str()).collect();
    sqlx::query(
        "INSERT INTO api_tokens (token_hash, token_id, tenant_id, scopes, user_id, device_id) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&hash_token(&token)[..])
    .bind(token_id)
    .bind(tenant_id)
    .bind(scopes)
    .bind(&spec.user_id)
    .bind(&spec.device_id)
    .execute(pool)
    .await?;
    if let Some(device) = &spec.device_id {
        super::device_owners::claim(pool, tenant_id, device, spec.user_id.as_deref()).await?;
    }
    Ok((token_id, token))
}

/// Creates an operator token (usage per tenant across every tenant, nothing else; see `auth`); returns
/// (token id, the token). The token itself is not stored.
pub async fn create_operator_token(
    pool: &PgPool,
    label: &str,
) -> Result<(Uuid, String), AdminError> {
    let label = label.trim();
    if label.is_empty() || label.chars().count() > 200 {
        return Err(AdminError::Invalid(
            "the label must have 1 to 200 characters".into(),
        ));
    }
    let token = generate_operator_token();
    let token_id = Uuid::new_v4();
    sqlx::query("INSERT INTO operator_tokens (token_hash, token_id, label) VALUES ($1, $2, $3)")
        .bind(&hash_token(&token)[..])
        .bind(token_id)
        .bind(label)
        .execute(pool)
        .await?;
    Ok((token_id, token))
}

/// Which token to revoke.
#[derive(Debug, Clone)]
pub enum TokenRef {
    /// The id `token create` reported.
    Id(Uuid),
    /// The token itself (only its hash is looked up).
    Token(String),
}

/// Revokes a token, tenant or operator (sets `revoked_at`; the row stays for audit). Returns the token
/// id, or None when no such token exists. Revoking twice keeps the first time. Replicas stop accepting
/// it once their token cache entry expires (`token_cache_secs`).
pub async fn revoke_token(pool: &PgPool, which: &TokenRef) -> Result<Option<Uuid>, AdminError> {
    let (by_id, by_hash) = match which {
        TokenRef::Id(id) => (Some(*id), None),
        TokenRef::Token(t) => (None, Some(hash_token(t.trim()).to_vec())),
    };
    // LEAST keeps an earlier revocation (it skips NULL); not COALESCE around now(), which Citus
    // refuses on its tables.
    let id: Option<Uuid> = sqlx::query_scalar(
        "WITH t AS (UPDATE api_tokens SET revoked_at = LEAST(revoked_at, now())
                    WHERE token_id = $1 OR token_hash = $2 RETURNING token_id),
              o AS (UPDATE operator_tokens SET revoked_at = LEAST(revoked_at, now())
                    WHERE token_id = $1 OR token_hash = $2 RETURNING token_id)
         SELECT token_id FROM t UNION ALL SELECT token_id FROM o",
    )
    .bind(by_id)
    .bind(by_hash)
    .fetch_optional(pool)
    .await?;
    Ok(id)
}

/// A tenant given by id or by (unique) name.
pub async fn resolve_tenant(pool: &PgPool, tenant: &str) -> Result<Uuid, AdminError> {
    let found: Vec<Uuid> = match Uuid::parse_str(tenant.trim()) {
        Ok(id) => {
            sqlx::query_scalar("SELECT tenant_id FROM tenants WHERE tenant_id = $1")
                .bind(id)
                .fetch_all(pool)
                .await?
        }
        Err(_) => {
            sqlx::query_scalar("SELECT tenant_id FROM tenants WHERE name = $1 LIMIT 2")
                .bind(tenant.trim())
                .fetch_all(pool)
                .await?
        }
    };
    match found.as_slice() {
        [id] => Ok(*id),
        [] => Err(AdminError::NoSuchTenant(tenant.to_string())),
        _ => Err(AdminError::Invalid(format!(
            "more than one tenant is named {tenant:?}; give the tenant id"
        ))),
    }
}
