//! `Query` and `Path` extractors whose rejections are [`ApiError`]s (400 with the JSON error body)
//! instead of axum's plain-text ones.
//!
//! Both refuse a NUL byte (`%00`) anywhere in the raw query string or path with a 400: Postgres text
//! cannot hold NUL, so such a value reaching a query made the database fail the statement (a 500). `%00`
//! is the only way to write NUL in a URI (it cannot appear raw), so looking at the raw text is exact.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// `axum::extract::Query`, rejecting with an [`ApiError`].
#[derive(Debug)]
pub struct Query<T>(pub T);

/// `axum::extract::Path`, rejecting with an [`ApiError`].
#[derive(Debug)]
pub struct Path<T>(pub T);

fn holds_nul(raw: &str) -> bool {
    raw.contains("%00")
}

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if parts.uri.query().is_some_and(holds_nul) {
            return Err(ApiError::BadRequest {
                code: "invalid_query",
                message: "the query string holds a NUL byte (%00)".into(),
            });
        }
        let axum::extract::Query(v) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Query(v))
    }
}

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if holds_nul(parts.uri.path()) {
            return Err(ApiError::BadRequest {
                code: "invalid_path",
                message: "the path holds a NUL byte (%00)".into(),
            });
        }
        let axum::extract::Path(v) =
            axum::extract::Path::<T>::from_request_parts(parts, state).await?;
        Ok(Path(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_encoded_nul_counts() {
        assert!(holds_nul("user=a%00b"));
        assert!(!holds_nul("user=a%2500b"));
        assert!(!holds_nul("user=a%0A0"));
    }
}
