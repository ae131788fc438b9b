//! Typed read scopes: what a read handler may see, as a value the query functions require.
//!
//! Every query in [`crate::query`] (and the device listing) takes a [`TenantRead`] instead of a raw tenant
//! id, so a read without a tenant filter cannot be written by accident: the only way to one is an
//! [`OperatorRead`], which only an operator token yields (see [`crate::auth`]) and which only
//! [`crate::query::usage`] accepts, grouped by tenant (and model) — never per user, session, colony or
//! device.
//!
//! - [`TenantRead`]: the token's tenant and, for a `read` token bound to a user (and without `admin`),
//!   that user. Built from the request's [`Principal`] (403 without the `read` scope; operator tokens
//!   are refused by the `Principal` extractor itself).
//! - [`UsageReader`]: what `GET /v1/usage` takes: a tenant's read, or the operator's.
//!
//! Both are extractors generic over the application state (they need only its
//! [`AuthState`](crate::auth::AuthState) part). A handler gets the database only as a
//! [`ReadDb`](crate::query::ReadDb), whose pool only the query functions reach: so a read handler holds a
//! scope and can run only queries that take one.

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use uuid::Uuid;

use crate::auth::{AuthState, Caller, Operator, Principal, Scope};
use crate::error::ApiError;

/// A read bound to one tenant (and to one user within it, for a user-bound `read` token).
#[derive(Debug, Clone)]
pub struct TenantRead {
    /// The only tenant whose rows this read may touch.
    tenant_id: Uuid,
    /// When set, only this user's rows.
    user: Option<String>,
}

impl TenantRead {
    /// The read a token allows: 403 without the `read` scope (`admin` implies it).
    pub fn of(p: &Principal) -> Result<TenantRead, ApiError> {
        p.require(Scope::Read)?;
        Ok(TenantRead {
            tenant_id: p.tenant_id,
            user: p.read_user().map(str::to_string),
        })
    }

    /// The whole of one tenant, for trusted in-process callers (benchmarks, tools). Request handlers
    /// get theirs from the token ([`TenantRead::of`], or the extractor).
    pub fn tenant_wide(tenant_id: Uuid) -> TenantRead {
        TenantRead {
            tenant_id,
            user: None,
        }
    }

    /// A read limited to one user, for unit tests of the queries.
    #[cfg(test)]
    pub(crate) fn for_user(tenant_id: Uuid, user: &str) -> TenantRead {
        TenantRead {
            tenant_id,
            user: Some(user.to_string()),
        }
    }

    pub fn tenant_id(&self) -> Uuid {
        self.tenant_id
    }

    /// The user this read is limited to, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }
}

impl<S> FromRequestParts<S> for TenantRead
where
    AuthState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        TenantRead::of(&Principal::from_request_parts(parts, state).await?)
    }
}

/// The operator-wide read: usage of every tenant, per tenant. Only an operator token yields one.
#[derive(Debug, Clone)]
pub struct OperatorRead {
    /// Who reads (for logs); also keeps the type from being built anywhere but [`OperatorRead::of`].
    token_id: Uuid,
}

impl OperatorRead {
    pub fn of(o: &Operator) -> OperatorRead {
        OperatorRead {
            token_id: o.token_id,
        }
    }

    pub fn token_id(&self) -> Uuid {
        self.token_id
    }

    /// An operator read, for unit tests of the queries.
    #[cfg(test)]
    pub(crate) fn for_tests() -> OperatorRead {
        OperatorRead {
            token_id: Uuid::nil(),
        }
    }
}

/// Who reads `GET /v1/usage`.
#[derive(Debug, Clone)]
pub enum UsageReader {
    Tenant(TenantRead),
    Operator(OperatorRead),
}

impl<S> FromRequestParts<S> for UsageReader
where
    AuthState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Ok(match Caller::from_request_parts(parts, state).await? {
            Caller::Tenant(p) => UsageReader::Tenant(TenantRead::of(&p)?),
            Caller::Operator(o) => UsageReader::Operator(OperatorRead::of(&o)),
        })
    }
}
