//! `Query` and `Path` extractors whose rejections are [`ApiError`]s (400 with the JSON error body)
//! instead of axum's plain-text ones.

use axum::extract::FromRequestParts;

use crate::error::ApiError;

/// `axum::extract::Query`, rejecting with an [`ApiError`].
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

/// `axum::extract::Path`, rejecting with an [`ApiError`].
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);
