//! `GET /openapi.json`: the OpenAPI 3.1 document, generated with `utoipa` from the handlers'
//! `#[utoipa::path]` annotations and the types they take and return (query-parameter structs, response
//! bodies, [`ErrorBody`]), so a field added to an answer is documented by construction.
//!
//! The batch request and response schemas are the published JSON Schema files of `apiary-schema`,
//! inserted as they are ([`super::docs`]): their `$defs` move to `components/schemas` (and their
//! references with them), so every `$ref` of the document resolves from its root. A test checks that
//! every route of [`super::router`] is documented; `tests/api/openapi.rs` validates real responses of
//! every endpoint against the schemas served here.

use axum::Json;
use serde_json::{Map, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::docs::ERROR_RESPONSE;
use crate::error::ErrorBody;

/// The document's skeleton: every path, and what `utoipa` cannot see (security, the error response).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Apiary ingest",
        description = "Batch intake of canonical agent events, usage rollups and session status. Errors are {\"error\": {\"code\", \"message\"}}. Tenant tokens (apy_…) are bound to one tenant and see nothing of another; a read token bound to a user sees that user's data only. Operator tokens (apo_…, made by the command line only) read GET /v1/usage per tenant and are refused (403) everywhere else."
    ),
    paths(
        super::batches::post_batch,
        super::usage::get_usage,
        super::tenant_metrics::get_tenant_metrics,
        super::exports::post_export,
        super::exports::list_exports,
        super::exports::delete_export,
        super::sessions::list_sessions,
        super::sessions::get_session,
        super::sessions::get_session_usage,
        super::sessions::get_session_tree,
        super::sessions::get_session_history,
        super::status::get_transitions,
        super::sessions::get_colony_usage,
        super::colonies::list_colonies,
        super::colonies::put_colony_label,
        super::devices::get_devices,
        super::device_keys::post_device_key,
        super::prices::get_prices,
        super::prices::post_price,
        super::prices::post_reprice,
        super::budgets::post_budget,
        super::budgets::list_budgets,
        super::budgets::get_budget,
        super::budgets::put_budget,
        super::budgets::patch_budget,
        super::budgets::delete_budget,
        super::alerts::list_alerts,
        super::alerts::post_destination,
        super::alerts::list_destinations,
        super::alerts::delete_destination,
        super::alerts::post_rule,
        super::alerts::list_rules,
        super::alerts::delete_rule,
        super::stream::get_stream,
        super::whoami::get_whoami,
        super::tenant::get_tenant_settings,
        super::tenant::put_tenant_settings,
        super::ops::healthz,
        super::ops::readyz,
        super::ops::metrics,
        get_openapi,
    ),
    components(schemas(
        ErrorBody,
        crate::query::usage::AnswerFormat,
        super::stream::StreamStatus,
        super::stream::StreamUsage,
        super::stream::StreamDevice
    )),
    modifiers(&Additions)
)]
pub struct ApiDoc;

/// The bearer scheme and the shared error response.
struct Additions;

impl Modify for Additions {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.responses.insert(
            ERROR_RESPONSE.to_string(),
            ResponseBuilder::new()
                .description("An error: {\"error\": {\"code\", \"message\", \"details\"?}}.")
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build()
                .into(),
        );
    }
}

/// This document (OpenAPI 3.1).
#[utoipa::path(
    get,
    path = "/openapi.json",
    responses((status = 200, description = "OpenAPI 3.1.", body = Object))
)]
pub async fn get_openapi() -> Json<Value> {
    Json(document())
}

/// The whole document.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document is JSON");
    let schemas = doc["components"]["schemas"]
        .as_object_mut()
        .expect("components/schemas");
    for (name, text) in [
        ("Batch", apiary_schema::json_schema::BATCH_SCHEMA),
        (
            "BatchResponse",
            apiary_schema::json_schema::BATCH_RESPONSE_SCHEMA,
        ),
    ] {
        insert_published(schemas, name, text);
    }
    insert_published(
        schemas,
        "TokenIdentity",
        &apiary_schema::json_schema::token_identity_schema(),
    );
    insert_published(
        schemas,
        "KeyRegistration",
        &apiary_schema::json_schema::key_registration_schema(),
    );
    doc
}

/// Puts a published JSON Schema under `name`, its `$defs` beside it (refusing to shadow a schema of
/// another name), with every `#/$defs/X` reference rewritten to `#/components/schemas/X`.
fn insert_published(schemas: &mut Map<String, Value>, name: &str, text: &str) {
    let mut schema: Value = serde_json::from_str(text).expect("published schema is JSON");
    rewrite_refs(&mut schema);
    let o = schema.as_object_mut().expect("a schema object");
    o.remove("$schema");
    if let Some(Value::Object(defs)) = o.remove("$defs") {
        for (def, s) in defs {
            if let Some(existing) = schemas.get(&def) {
                assert_eq!(
                    existing, &s,
                    "two published schemas define {def} differently"
                );
            }
            schemas.insert(def, s);
        }
    }
    schemas.insert(name.to_string(), schema);
}

fn rewrite_refs(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get_mut("$ref") {
                if let Some(def) = r.strip_prefix("#/$defs/") {
                    *r = format!("#/components/schemas/{def}");
                }
            }
            o.values_mut().for_each(rewrite_refs);
        }
        Value::Array(a) => a.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` of `v`.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get("$ref") {
                    out.push(r.clone());
                }
                o.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn every_routed_path_is_documented_with_a_response_schema() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().unwrap();
        let router_src = include_str!("mod.rs");
        assert_eq!(router_src.matches(".route(").count(), paths.len());
        for (path, item) in paths {
            assert!(
                router_src.contains(&format!("\"{path}\"")),
                "{path} is not routed"
            );
            for (method, op) in item.as_object().unwrap() {
                // A success with a body (200, or 201 for a creation), or a deletion's bare 204.
                let responses = &op["responses"];
                let with_body = ["200", "201"].iter().any(|c| {
                    responses[c]["content"]
                        .as_object()
                        .is_some_and(|c| !c.is_empty())
                });
                let deleted = method == "delete" && responses["204"].is_object();
                assert!(
                    with_body || deleted,
                    "{method} {path} has no 200/201 content (or 204 for a delete): {responses}"
                );
            }
        }
    }

    #[test]
    fn every_reference_resolves_from_the_root() {
        let doc = document();
        let mut all = vec![];
        refs(&doc, &mut all);
        assert!(all
            .iter()
            .any(|r| r == "#/components/schemas/CanonicalEvent"));
        for r in all {
            let pointer = r.strip_prefix('#').expect("a local reference");
            assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
        }
    }
}
