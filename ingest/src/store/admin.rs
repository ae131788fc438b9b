//! Tenants and tokens (the `tenant create` and `token create` commands).

use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::{generate_token, hash_token, Scope};

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

/// What a new token is bound to.
#[derive(Debug, Clone)]
pub struct TokenSpec {
    /// A tenant id, or the name of exactly one tenant.
    pub tenant: String,
    pub scopes: Vec<Scope>,
    pub user_id: Option<String>,
    pub device_id: Option<String>,
}

/// Creates a token; returns (token id, the token). The token itself is not stored.
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
    Ok((token_id, token))
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
