//! `Query` and `Path` extractors whose rejections are [`ApiError`]s (400 with the JSON error body)
//! instead of axum's plain-text ones.
//!
//! A query string deserializes into the route's parameter struct ([`query_params`]); every failure is a
//! 400 naming the parameter (`parameter `limit`: must be a whole number from 1 to 1000`): the struct
//! refuses unknown parameters (`deny_unknown_fields`), and each field's type parses its own text
//! (`serde_path_to_error` tells which field failed).
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

/// Deserializes a raw query string into `T`; a failure is a 400 naming the parameter.
pub fn query_params<T: DeserializeOwned>(raw: &str) -> Result<T, ApiError> {
    if holds_nul(raw) {
        return Err(ApiError::BadRequest {
            code: "invalid_query",
            message: "the query string holds a NUL byte (%00)".into(),
        });
    }
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(raw.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let why = e.into_inner().to_string();
        match named_in(&why, "unknown field `") {
            Some(name) => ApiError::bad_param(name, "unknown parameter"),
            None => match named_in(&why, "duplicate field `") {
                Some(name) => ApiError::bad_param(name, "is given more than once"),
                None if path == "." => ApiError::BadRequest {
                    code: "invalid_query",
                    message: format!("the query string is malformed: {why}"),
                },
                None => ApiError::bad_param(&path, why),
            },
        }
    })
}

/// The name serde's `unknown field `x`, expected ...` (or `duplicate field `x``) message names.
fn named_in<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    message.strip_prefix(prefix)?.split('`').next()
}

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        query_params(parts.uri.query().unwrap_or("")).map(Query)
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

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct P {
        limit: Option<u32>,
        name: Option<String>,
    }

    #[test]
    fn every_refusal_of_a_query_string_names_the_parameter() {
        let message = |raw: &str| query_params::<P>(raw).unwrap_err().to_string();
        assert_eq!(
            message("colour=red"),
            "parameter `colour`: unknown parameter"
        );
        assert!(
            message("limit=x").starts_with("parameter `limit`: "),
            "{}",
            message("limit=x")
        );
        assert_eq!(
            message("name=a&name=b"),
            "parameter `name`: is given more than once"
        );
        assert!(message("name=%00").contains("NUL"));
        let p: P = query_params("limit=3&name=a%20b").unwrap();
        assert_eq!((p.limit, p.name.as_deref()), (Some(3), Some("a b")));
    }

    #[test]
    fn only_an_encoded_nul_counts() {
        assert!(holds_nul("user=a%00b"));
        assert!(!holds_nul("user=a%2500b"));
        assert!(!holds_nul("user=a%0A0"));
    }
}
