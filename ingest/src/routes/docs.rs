//! Pieces of the OpenAPI document that are not derived from a handler's own types: the error answers
//! each kind of route can give (as `IntoResponses`, all referring to the one `Error` response), and
//! the batch request and response, whose schemas are the published JSON Schema files of
//! `apiary-schema` (inserted whole by [`super::openapi`], so they cannot drift from the wire types).

use std::borrow::Cow;
use std::collections::BTreeMap;

use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr, Response};
use utoipa::{IntoResponses, PartialSchema, ToSchema};

/// The name of the shared error response (`#/components/responses/Error`).
pub const ERROR_RESPONSE: &str = "Error";

fn errors(codes: &[&str]) -> BTreeMap<String, RefOr<Response>> {
    codes
        .iter()
        .map(|c| {
            (
                c.to_string(),
                RefOr::Ref(Ref::from_response_name(ERROR_RESPONSE)),
            )
        })
        .collect()
}

/// What a read route can refuse with.
pub struct ReadErrors;

impl IntoResponses for ReadErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        errors(&["400", "401", "403", "404", "408", "429", "503"])
    }
}

/// What a usage read can refuse with: a read's refusals, and 422 `too_many_rows` for an answer past
/// the bound of rows (see `query::usage::page`).
pub struct UsageErrors;

impl IntoResponses for UsageErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        errors(&["400", "401", "403", "404", "408", "422", "429", "503"])
    }
}

/// What a route that changes a resource in place (`PUT`, `PATCH`) can refuse with: a read's refusals,
/// and 422 for a body that cannot do what the method asks.
pub struct EditErrors;

impl IntoResponses for EditErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        errors(&["400", "401", "403", "404", "408", "422", "429", "503"])
    }
}

/// What a route that only authenticates can refuse with.
pub struct AuthErrors;

impl IntoResponses for AuthErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        errors(&["401", "403", "429"])
    }
}

/// What `POST /v1/batches` can refuse a whole batch with.
pub struct BatchErrors;

impl IntoResponses for BatchErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        errors(&[
            "400", "401", "403", "408", "413", "415", "422", "429", "503",
        ])
    }
}

/// A placeholder schema, replaced in the document by the published one named `name`.
fn published(name: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(format!("replaced by the published {name} schema")))
        .into()
}

/// The batch request (`apiary_schema::Batch`), by its published schema.
pub struct BatchBody;

impl PartialSchema for BatchBody {
    fn schema() -> RefOr<Schema> {
        published("Batch")
    }
}

impl ToSchema for BatchBody {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Batch")
    }
}

/// The batch answer (`apiary_schema::BatchResponse`), by its published schema.
pub struct BatchResponseBody;

impl PartialSchema for BatchResponseBody {
    fn schema() -> RefOr<Schema> {
        published("BatchResponse")
    }
}

impl ToSchema for BatchResponseBody {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("BatchResponse")
    }
}

/// The answer of `GET /v1/whoami` (`apiary_schema::identity::TokenIdentity`), by its generated schema.
pub struct TokenIdentityBody;

impl PartialSchema for TokenIdentityBody {
    fn schema() -> RefOr<Schema> {
        published("TokenIdentity")
    }
}

impl ToSchema for TokenIdentityBody {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("TokenIdentity")
    }
}

/// The body of `POST /v1/devices/key` (`apiary_schema::device_key::KeyRegistration`), by its generated
/// schema.
pub struct KeyRegistrationBody;

impl PartialSchema for KeyRegistrationBody {
    fn schema() -> RefOr<Schema> {
        published("KeyRegistration")
    }
}

impl ToSchema for KeyRegistrationBody {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("KeyRegistration")
    }
}
