//! `GET /openapi.json`: the OpenAPI 3.1 document, built in code next to the routes it describes. The
//! batch request and response schemas are the published JSON Schema files of `apiary-schema`, embedded
//! as they are, so they cannot drift from the wire types. A test checks that every route of
//! [`super::router`] is documented.

use axum::Json;
use serde_json::{json, Value};

/// Paths documented here (the test compares them with the router).
pub const PATHS: [&str; 15] = [
    "/v1/batches",
    "/v1/usage",
    "/v1/sessions",
    "/v1/sessions/{id}",
    "/v1/sessions/{id}/usage",
    "/v1/sessions/{id}/tree",
    "/v1/sessions/{id}/history",
    "/v1/status/transitions",
    "/v1/colonies/{id}/usage",
    "/v1/devices",
    "/v1/whoami",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
];

pub async fn get_openapi() -> Json<Value> {
    Json(document())
}

fn embedded(schema: &str) -> Value {
    let mut v: Value = serde_json::from_str(schema).expect("published schema is JSON");
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
    }
    v
}

fn errors(codes: &[&str]) -> Value {
    let mut m = serde_json::Map::new();
    for c in codes {
        m.insert(
            (*c).into(),
            json!({ "$ref": "#/components/responses/Error" }),
        );
    }
    Value::Object(m)
}

fn read_op(summary: &str, params: Value, ok: &str) -> Value {
    let mut responses = errors(&["400", "401", "403", "404", "429"]);
    responses["200"] = json!({ "description": ok, "content": { "application/json": { "schema": { "type": "object" } } } });
    json!({ "get": { "summary": summary, "security": [{ "bearer": [] }], "parameters": params, "responses": responses } })
}

fn usage_params() -> Value {
    json!([
        { "name": "from", "in": "query", "description": "RFC 3339 time or YYYY-MM-DD (local midnight in tz); on a 15-minute boundary. Default: `to` minus 30 days.", "schema": { "type": "string" } },
        { "name": "to", "in": "query", "description": "Exclusive end, same forms. Default: the next 15-minute boundary.", "schema": { "type": "string" } },
        { "name": "group_by", "in": "query", "description": "Comma-separated: tenant, user, model, colony, session, device. A tenant's token (any scope, admin included) reads its own tenant only: grouped by tenant it answers that one row. An operator token (apiary-ingest operator-token create) reads every tenant and must group by tenant, optionally with model; other dimensions are refused (400).", "schema": { "type": "string" } },
        { "name": "granularity", "in": "query", "schema": { "type": "string", "enum": ["hour", "day", "month", "total"], "default": "total" } },
        { "name": "tz", "in": "query", "description": "IANA zone for buckets, e.g. Asia/Kolkata. Default UTC.", "schema": { "type": "string" } }
    ])
}

fn list_params() -> Value {
    json!([
        { "name": "status", "in": "query", "description": "Comma-separated statuses: active, waiting, idle, degraded, stalled, needs_attention, failed, completed, offline, crashed.", "schema": { "type": "string" } },
        { "name": "user", "in": "query", "schema": { "type": "string", "maxLength": 200 } },
        { "name": "device", "in": "query", "schema": { "type": "string", "maxLength": 200 } },
        { "name": "since", "in": "query", "description": "RFC 3339: only sessions with an event at or after this time.", "schema": { "type": "string" } },
        { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 1, "maximum": 1000, "default": 100 } },
        { "name": "cursor", "in": "query", "description": "The `next_cursor` of the previous page.", "schema": { "type": "string" } }
    ])
}

fn id_param(what: &str) -> Value {
    json!({ "name": "id", "in": "path", "required": true, "description": what, "schema": { "type": "string", "maxLength": 200 } })
}

/// The whole document.
pub fn document() -> Value {
    let mut id_and_usage = usage_params();
    id_and_usage
        .as_array_mut()
        .expect("array")
        .insert(0, id_param("session id"));
    let mut colony_params = usage_params();
    colony_params
        .as_array_mut()
        .expect("array")
        .insert(0, id_param("colony id"));
    let mut batch_responses = errors(&[
        "400", "401", "403", "408", "413", "415", "422", "429", "503",
    ]);
    batch_responses["200"] = json!({ "description": "Per-event verdicts. Replaying a batch changes nothing.",
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/BatchResponse" } } } });
    json!({
        "openapi": "3.1.0",
        "info": { "title": "Apiary ingest", "version": env!("CARGO_PKG_VERSION"),
            "description": "Batch intake of canonical agent events, usage rollups and session status. Errors are {\"error\": {\"code\", \"message\"}}. Tenant tokens (apy_…) are bound to one tenant and see nothing of another; a read token bound to a user sees that user's data only. Operator tokens (apo_…, made by the command line only) read GET /v1/usage per tenant and are refused (403) everywhere else." },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": {
                "Batch": embedded(apiary_schema::json_schema::BATCH_SCHEMA),
                "BatchResponse": embedded(apiary_schema::json_schema::BATCH_RESPONSE_SCHEMA),
                "Error": { "type": "object", "required": ["error"], "properties": { "error": {
                    "type": "object", "required": ["code", "message"],
                    "properties": { "code": { "type": "string" }, "message": { "type": "string" },
                        "details": { "type": "array", "items": { "type": "string" } } } } } }
            },
            "responses": { "Error": { "description": "An error.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } } }
        },
        "paths": {
            "/v1/batches": { "post": {
                "summary": "Ingest a batch of canonical events (scope ingest). Content-Encoding gzip or zstd accepted.",
                "description": "Events and session bindings together count towards max_batch_events (413). A binding whose ids (session, user, device, parent; and agent.device_id) are not ids by the policy's rule — e.g. they look like an e-mail address, a path or a key — or whose first_seen_at (clock-corrected) lies outside the accepted window refuses the whole batch (422, one detail per problem). A token bound to a user or device may write only that user's (device's) sessions: an event whose session, parent or colony belongs to another is rejected per event with the reason.",
                "security": [{ "bearer": [] }],
                "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Batch" } } } },
                "responses": batch_responses } },
            "/v1/usage": read_op("Usage rows (bucket, group keys, sums) and totals; exact sums of the stored events. The one route an operator token may read (per tenant).", usage_params(), "Usage"),
            "/v1/sessions": read_op("The tenant's sessions, most recently active first (last event time, then id), each as /v1/sessions/{id} returns it; `next_cursor` (null at the end) gives the next page. With a status filter a page may come back short, even empty, with a cursor to go on from.", list_params(), "Sessions"),
            "/v1/sessions/{id}": read_op("A session: identity, phase, status (active|waiting|idle|degraded|stalled|needs_attention|failed|completed|offline|crashed; the shared health model, see the README's status table) with status_since and status_cause, time_in_state (seconds per status), lifecycle, last health signal, totals.", json!([id_param("session id")]), "Session"),
            "/v1/sessions/{id}/history": read_op("A session's status history: {session_id, status, transitions: [{at, from, to, cause}] oldest first (from is null for the first), truncated, time_in_state}. Includes the transitions time caused after the last event (no progress for stall_after) and the current offline overlay.", json!([id_param("session id")]), "History"),
            "/v1/status/transitions": read_op("The tenant's status transitions {session_id, at, from, to, cause} with from <= at < to, oldest first, and truncated. A user-bound read token sees its user's sessions only.", json!([
                { "name": "from", "in": "query", "description": "RFC 3339. Default: `to` minus 24 hours.", "schema": { "type": "string" } },
                { "name": "to", "in": "query", "description": "RFC 3339, exclusive. Default: now.", "schema": { "type": "string" } },
                { "name": "status", "in": "query", "description": "Comma-separated: only transitions into these statuses.", "schema": { "type": "string" } },
                { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 1, "maximum": 10000, "default": 1000 } }
            ]), "Transitions"),
            "/v1/sessions/{id}/usage": read_op("A session's usage (default: all time, by model).", id_and_usage, "Usage"),
            "/v1/sessions/{id}/tree": read_op("The session → colonies → workers, with usage rolled up.", json!([id_param("session id")]), "Tree"),
            "/v1/colonies/{id}/usage": read_op("A colony's usage: its workers (default: all time, by session).", colony_params, "Usage"),
            "/v1/devices": read_op("Devices: last heartbeat, backlog, agent version, online.", json!([]), "Devices"),
            "/v1/whoami": { "get": { "summary": "What the presented token is: tenant_id, scopes, and the user_id and device_id it is bound to (null when unbound). Any scope.", "security": [{ "bearer": [] }], "responses": { "200": { "description": "The token's identity.", "content": { "application/json": { "schema": { "type": "object", "required": ["tenant_id", "scopes", "user_id", "device_id"], "properties": { "tenant_id": { "type": "string", "format": "uuid" }, "scopes": { "type": "array", "items": { "type": "string", "enum": ["ingest", "read", "admin"] } }, "user_id": { "type": ["string", "null"] }, "device_id": { "type": ["string", "null"] } } } } } }, "401": { "$ref": "#/components/responses/Error" }, "429": { "$ref": "#/components/responses/Error" } } } },
            "/healthz": { "get": { "summary": "Liveness.", "responses": { "200": { "description": "Up." } } } },
            "/readyz": { "get": { "summary": "Database reachable and migrations applied.", "responses": { "200": { "description": "Ready." }, "503": { "$ref": "#/components/responses/Error" } } } },
            "/metrics": { "get": { "summary": "Prometheus metrics.", "responses": { "200": { "description": "Text format.", "content": { "text/plain": {} } } } } },
            "/openapi.json": { "get": { "summary": "This document.", "responses": { "200": { "description": "OpenAPI 3.1." } } } }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_path_is_in_the_document_and_the_router_source() {
        let doc = document();
        let paths = doc["paths"].as_object().unwrap();
        assert_eq!(paths.len(), PATHS.len());
        let router_src = include_str!("mod.rs");
        for p in PATHS {
            assert!(paths.contains_key(p), "{p} missing from the document");
            assert!(
                router_src.contains(&format!("\"{p}\"")),
                "{p} is not routed"
            );
        }
        assert_eq!(
            router_src.matches(".route(").count(),
            PATHS.len(),
            "a route is not documented"
        );
    }
}
