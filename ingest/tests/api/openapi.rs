//! The served OpenAPI document against real answers: every endpoint is called on a running app with
//! data in it, and each answer's body is validated against the schema the document gives for that
//! path, method and status (OpenAPI 3.1 schemas are JSON Schema 2020-12; `$ref`s resolve within the
//! document). Also: `/metrics` parses as Prometheus text with the series dashboards use.

use chrono::{Duration, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// JSON pointer escaping of one path segment.
fn escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The schema the document gives for `method path` answering `status`, as a pointer into the document
/// (following a `$ref` to a shared response).
fn schema_pointer(doc: &Value, path: &str, method: &str, status: u16) -> String {
    let op = format!("/paths/{}/{method}/responses", escape(path));
    let mut response = format!("{op}/{status}");
    let r = doc
        .pointer(&response)
        .unwrap_or_else(|| panic!("{method} {path} documents no {status}"));
    if let Some(target) = r["$ref"].as_str() {
        response = target.trim_start_matches('#').to_string();
    }
    let schema = format!("{response}/content/application~1json/schema");
    assert!(
        doc.pointer(&schema).is_some(),
        "{method} {path} {status} has no JSON schema"
    );
    schema
}

/// Validates `body` against the schema at `pointer` of `doc`.
fn check(doc: &Value, what: &str, pointer: &str, body: &Value) {
    // The whole document is the root resource, so every `#/components/...` reference resolves.
    let mut root = doc.clone();
    // A fragment is a URI: the braces of a path template are percent-encoded there.
    let fragment = pointer.replace('{', "%7B").replace('}', "%7D");
    root["$ref"] = json!(format!("#{fragment}"));
    root["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&root)
        .unwrap_or_else(|e| panic!("{what}: the schema does not compile: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{what}: {errors:#?}\nbody: {body:#}");
}

struct Call<'a> {
    path: &'a str,
    url: String,
    token: Option<&'a str>,
}

/// A colony key as the agent derives it (`ck_` + 32 hex digits).
const COLONY_KEY: &str = "ck_0123456789abcdef0123456789abcdef";

#[sqlx::test(migrations = "../migrations")]
async fn every_endpoint_answers_what_the_served_document_says(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let doc: Value = app
        .client
        .get(format!("{}/openapi.json", app.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();

    // Data for every read: a queen with a worker in its colony, usage, a heartbeat, a failure.
    let now = Utc::now();
    let mut w = llm("w1", now, "m", 10, 2, 0.25);
    w["agent_role"] = "worker".into();
    w["colony_id"] = "q1".into();
    w["parent_session_id"] = "q1".into();
    let hb = event(
        "agent.heartbeat",
        None,
        now,
        json!({ "backlog_events": 3, "agent_version": "0.2.0", "oldest_pending_age_seconds": 1.5 }),
    );
    let events = vec![
        llm("q1", now - Duration::minutes(5), "m", 100, 5, 1.0),
        tool("q1", now - Duration::minutes(4), true),
        w,
        hb,
        // Work: a task, an activated trigger with its next fire time, a tool call in flight.
        event(
            "task.changed",
            Some("q1"),
            now - Duration::minutes(3),
            json!({ "action": "created", "task_id": "1", "status": "pending" }),
        ),
        event(
            "trigger.changed",
            Some("q1"),
            now - Duration::minutes(3),
            json!({ "action": "activated", "trigger_id": "nightly", "trigger_type": "timer",
                    "next_fire_at": (now + Duration::hours(8)).timestamp_millis() }),
        ),
        event(
            "tool.call",
            Some("q1"),
            now - Duration::minutes(2),
            json!({ "tool_use_id": "toolu_1", "tool_name": "grep", "status": "started" }),
        ),
        // A named colony (its key, as the agent derives it) run in the queen's session.
        event(
            "colony.created",
            Some("q1"),
            now - Duration::minutes(6),
            json!({ "source": "created", "colony_id": "q1", "queen_session_id": "q1",
                    "colony_key": COLONY_KEY }),
        ),
        // Durations: a timed call and an untimed one (for the per-tool percentiles and their null).
        event(
            "tool.call",
            Some("q1"),
            now - Duration::minutes(1),
            json!({ "tool_use_id": "toolu_2", "tool_name": "read_file", "status": "completed",
                    "duration_ms": 1250 }),
        ),
        event(
            "tool.call",
            Some("q1"),
            now - Duration::minutes(1),
            json!({ "tool_use_id": "toolu_3", "tool_name": "bash", "status": "completed" }),
        ),
    ];
    let body = serde_json::to_vec(&batch(events, vec![binding("q1", "alice")])).unwrap();
    let response = app
        .client
        .post(format!("{}/v1/batches", app.base))
        .bearer_auth(&t.ingest)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    check(
        &doc,
        "POST /v1/batches",
        &schema_pointer(&doc, "/v1/batches", "post", 200),
        &answer,
    );
    let (s, refused) = app
        .post_batch(&t.ingest, &json!({ "schema_version": 1 }))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    check(
        &doc,
        "POST /v1/batches 422",
        &schema_pointer(&doc, "/v1/batches", "post", 422),
        &refused,
    );

    let day = now.format("%Y-%m-%d").to_string();
    let read = Some(t.read.as_str());
    let calls = [
        Call {
            path: "/v1/usage",
            url: format!("/v1/usage?group_by=user,model,session&granularity=hour&from={day}"),
            token: read,
        },
        Call {
            path: "/v1/usage",
            url: "/v1/usage?group_by=tenant,device,colony&tz=Asia/Kolkata&granularity=day".into(),
            token: read,
        },
        Call {
            path: "/v1/usage",
            url: format!("/v1/usage?group_by=tool,session&granularity=hour&from={day}"),
            token: read,
        },
        Call {
            path: "/v1/sessions/{id}/usage",
            url: "/v1/sessions/q1/usage?group_by=tool".into(),
            token: read,
        },
        Call {
            path: "/v1/sessions",
            url: "/v1/sessions?limit=1".into(),
            token: read,
        },
        Call {
            path: "/v1/sessions/{id}",
            url: "/v1/sessions/q1".into(),
            token: read,
        },
        Call {
            path: "/v1/sessions/{id}/usage",
            url: "/v1/sessions/q1/usage".into(),
            token: read,
        },
        Call {
            path: "/v1/sessions/{id}/tree",
            url: "/v1/sessions/q1/tree".into(),
            token: read,
        },
        Call {
            path: "/v1/sessions/{id}/history",
            url: "/v1/sessions/q1/history".into(),
            token: read,
        },
        Call {
            path: "/v1/status/transitions",
            url: "/v1/status/transitions".into(),
            token: read,
        },
        Call {
            path: "/v1/colonies/{id}/usage",
            url: "/v1/colonies/q1/usage".into(),
            token: read,
        },
        Call {
            path: "/v1/colonies",
            url: format!("/v1/colonies?from={day}&tz=Asia/Kolkata"),
            token: read,
        },
        Call {
            path: "/v1/colonies/{id}/usage",
            url: format!("/v1/colonies/{COLONY_KEY}/usage"),
            token: read,
        },
        Call {
            path: "/v1/devices",
            url: "/v1/devices".into(),
            token: read,
        },
        Call {
            path: "/v1/whoami",
            url: "/v1/whoami".into(),
            token: read,
        },
        Call {
            path: "/v1/tenant/settings",
            url: "/v1/tenant/settings".into(),
            token: read,
        },
        Call {
            path: "/healthz",
            url: "/healthz".into(),
            token: None,
        },
        Call {
            path: "/readyz",
            url: "/readyz".into(),
            token: None,
        },
        Call {
            path: "/openapi.json",
            url: "/openapi.json".into(),
            token: None,
        },
        // Refusals answer the documented error body.
        Call {
            path: "/v1/sessions/{id}",
            url: "/v1/sessions/nobody".into(),
            token: read,
        },
        Call {
            path: "/v1/usage",
            url: "/v1/usage?colour=red".into(),
            token: read,
        },
        Call {
            path: "/v1/devices",
            url: "/v1/devices".into(),
            token: Some("apy_unknown"),
        },
        Call {
            path: "/v1/sessions",
            url: "/v1/sessions".into(),
            token: Some(t.ingest.as_str()),
        },
    ];
    let mut documented = std::collections::BTreeSet::new();
    for c in &calls {
        let mut req = app.client.get(format!("{}{}", app.base, c.url));
        if let Some(token) = c.token {
            req = req.bearer_auth(token);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap();
        let what = format!("GET {} ({status})", c.url);
        check(
            &doc,
            &what,
            &schema_pointer(&doc, c.path, "get", status),
            &body,
        );
        if status == 200 {
            documented.insert(c.path);
        }
    }
    // The label (a PUT, admin scope), then the listing that shows it.
    let admin = apiary_ingest::store::admin::create_token(
        &app.pool,
        &apiary_ingest::store::admin::TokenSpec {
            tenant: t.id.to_string(),
            scopes: vec![apiary_ingest::auth::Scope::Admin],
            user_id: None,
            device_id: None,
        },
    )
    .await
    .unwrap()
    .1;
    for (token, want) in [(&t.read, 403), (&admin, 200)] {
        let r = app
            .client
            .put(format!("{}/v1/colonies/{COLONY_KEY}/label", app.base))
            .bearer_auth(token)
            .json(&json!({ "label": "Billing" }))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        assert_eq!(status, want);
        let body: Value = r.json().await.unwrap();
        let path = "/v1/colonies/{key}/label";
        check(
            &doc,
            &format!("PUT {path} ({status})"),
            &schema_pointer(&doc, path, "put", status),
            &body,
        );
        documented.insert(path);
    }
    // The tenant's settings (a PUT, admin scope).
    for (token, want) in [(&t.read, 403), (&admin, 200)] {
        let r = app
            .client
            .put(format!("{}/v1/tenant/settings", app.base))
            .bearer_auth(token)
            .json(&json!({ "colony_names": "names" }))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        assert_eq!(status, want);
        let body: Value = r.json().await.unwrap();
        let path = "/v1/tenant/settings";
        check(
            &doc,
            &format!("PUT {path} ({status})"),
            &schema_pointer(&doc, path, "put", status),
            &body,
        );
    }
    // A tenant price (a POST, admin scope), then the list that shows it.
    for (token, want) in [(&t.read, 403), (&admin, 200)] {
        let r = app
            .client
            .post(format!("{}/v1/prices", app.base))
            .bearer_auth(token)
            .json(
                &json!({"models": ["m*"], "from": "2026-01-01", "input": "1.00", "output": "2.00",
                "tiers": [{"above_input_tokens": 200000, "input": "2.00", "output": "4.00"}]}),
            )
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        assert_eq!(status, want);
        let body: Value = r.json().await.unwrap();
        let path = "/v1/prices";
        check(
            &doc,
            &format!("POST {path} ({status})"),
            &schema_pointer(&doc, path, "post", status),
            &body,
        );
    }
    let (s, prices) = app.get(&t.read, "/v1/prices").await;
    assert_eq!(s, StatusCode::OK);
    check(
        &doc,
        "GET /v1/prices",
        &schema_pointer(&doc, "/v1/prices", "get", 200),
        &prices,
    );
    assert_eq!(prices["prices"][0]["owner"], "tenant", "{prices}");
    documented.insert("/v1/prices");
    for (token, want) in [(&t.read, 403), (&admin, 200)] {
        let r = app
            .client
            .post(format!(
                "{}/v1/prices/reprice?from=2026-01-01&to=2026-02-01",
                app.base
            ))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        assert_eq!(status, want);
        let body: Value = r.json().await.unwrap();
        let path = "/v1/prices/reprice";
        check(
            &doc,
            &format!("POST {path} ({status})"),
            &schema_pointer(&doc, path, "post", status),
            &body,
        );
    }
    documented.insert("/v1/prices/reprice");
    // Budgets and alerts: each write refused to a read token and accepted for the admin, each answer
    // checked against the document; the alert list holds a fired alert.
    let exchange = |method: reqwest::Method,
                    path: &'static str,
                    url: String,
                    token: String,
                    body: Option<Value>,
                    want: u16| {
        let (client, base, doc) = (app.client.clone(), app.base.clone(), doc.clone());
        async move {
            let mut req = client
                .request(method.clone(), format!("{base}{url}"))
                .bearer_auth(token);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            assert_eq!(status, want, "{method} {url}: {text}");
            if status == 204 {
                assert!(text.is_empty(), "{method} {url}: {text}");
                return Value::Null;
            }
            let body: Value = serde_json::from_str(&text).unwrap();
            let m = method.as_str().to_ascii_lowercase();
            check(
                &doc,
                &format!("{method} {url} ({status})"),
                &schema_pointer(&doc, path, &m, status),
                &body,
            );
            body
        }
    };
    use reqwest::Method;
    let budget_body =
        json!({"name": "team", "period": "month", "tz": "Europe/Berlin", "limit_usd": "0.40"});
    exchange(
        Method::POST,
        "/v1/budgets",
        "/v1/budgets".into(),
        t.read.clone(),
        Some(budget_body.clone()),
        403,
    )
    .await;
    let budget = exchange(
        Method::POST,
        "/v1/budgets",
        "/v1/budgets".into(),
        admin.clone(),
        Some(budget_body),
        201,
    )
    .await;
    let bid = budget["budget_id"].as_str().unwrap().to_string();
    let list = exchange(
        Method::GET,
        "/v1/budgets",
        "/v1/budgets".into(),
        t.read.clone(),
        None,
        200,
    )
    .await;
    assert_eq!(list["budgets"][0]["crossed"][0]["threshold"], 50, "{list}");
    exchange(
        Method::GET,
        "/v1/budgets/{id}",
        format!("/v1/budgets/{bid}"),
        t.read.clone(),
        None,
        200,
    )
    .await;
    exchange(
        Method::PUT,
        "/v1/budgets/{id}",
        format!("/v1/budgets/{bid}"),
        admin.clone(),
        Some(json!({"period": "day", "limit_tokens": 1000})),
        422,
    )
    .await;
    exchange(
        Method::PUT,
        "/v1/budgets/{id}",
        format!("/v1/budgets/{bid}"),
        admin.clone(),
        Some(json!({"scope": {}, "period": "day", "limit_tokens": 1000})),
        200,
    )
    .await;
    exchange(
        Method::PATCH,
        "/v1/budgets/{id}",
        format!("/v1/budgets/{bid}"),
        admin.clone(),
        Some(json!({"name": "renamed", "limit_tokens": 2000})),
        200,
    )
    .await;
    let dest = exchange(
        Method::POST,
        "/v1/alerts/destinations",
        "/v1/alerts/destinations".into(),
        admin.clone(),
        Some(json!({"kind": "slack", "url": "https://hooks.slack.com/services/T0/B0/x"})),
        201,
    )
    .await;
    let did = dest["destination_id"].as_str().unwrap().to_string();
    let listed = exchange(
        Method::GET,
        "/v1/alerts/destinations",
        "/v1/alerts/destinations".into(),
        admin.clone(),
        None,
        200,
    )
    .await;
    // The URL is answered once, at creation; the document says so too.
    assert!(dest["url"].is_string() && listed["destinations"][0].get("url").is_none());
    let schemas = &doc["components"]["schemas"];
    assert!(schemas["DestinationBody"]["properties"]
        .get("url")
        .is_none());
    assert!(schemas["DestinationBody"]["properties"]["url_fingerprint"].is_object());
    assert!(schemas["CreatedDestination"]
        .to_string()
        .contains("\"url\""));
    // A usage export: its headers are answered once, at creation, never listed.
    let export = exchange(
        Method::POST,
        "/v1/exports",
        "/v1/exports".into(),
        admin.clone(),
        Some(json!({"url": "https://otlp.example.com/v1/metrics", "headers": {"api-key": "k"}, "dimensions": ["model"]})),
        201,
    )
    .await;
    let eid = export["export_id"].as_str().unwrap().to_string();
    let listed = exchange(
        Method::GET,
        "/v1/exports",
        "/v1/exports".into(),
        admin.clone(),
        None,
        200,
    )
    .await;
    assert_eq!(export["headers"]["api-key"], "k");
    assert!(listed["exports"][0].get("headers").is_none(), "{listed}");
    exchange(
        Method::DELETE,
        "/v1/exports/{id}",
        format!("/v1/exports/{eid}"),
        admin.clone(),
        None,
        204,
    )
    .await;
    let rule = exchange(Method::POST, "/v1/alerts/rules", "/v1/alerts/rules".into(), admin.clone(),
        Some(json!({"kind": "session_status", "destination_id": did, "statuses": ["active", "waiting", "idle", "degraded", "stalled", "needs_attention", "failed", "completed"]})), 201).await;
    let rid = rule["rule_id"].as_str().unwrap().to_string();
    exchange(
        Method::GET,
        "/v1/alerts/rules",
        "/v1/alerts/rules".into(),
        t.read.clone(),
        None,
        200,
    )
    .await;
    let db = apiary_ingest::query::ReadDb::new(
        app.pool.clone(),
        apiary_ingest::status::rules(&test_settings()),
    );
    let fired = apiary_ingest::alerts::evaluate::tenant(&app.pool, &db, t.id, 180, Utc::now())
        .await
        .unwrap();
    assert!(fired.fired > 0, "{fired:?}");
    let alerts = exchange(
        Method::GET,
        "/v1/alerts",
        "/v1/alerts".into(),
        t.read.clone(),
        None,
        200,
    )
    .await;
    assert_eq!(
        alerts["alerts"][0]["notifications"][0]["event"], "firing",
        "{alerts}"
    );
    exchange(
        Method::DELETE,
        "/v1/alerts/rules/{id}",
        format!("/v1/alerts/rules/{rid}"),
        admin.clone(),
        None,
        204,
    )
    .await;
    exchange(
        Method::DELETE,
        "/v1/alerts/destinations/{id}",
        format!("/v1/alerts/destinations/{did}"),
        admin.clone(),
        None,
        204,
    )
    .await;
    exchange(
        Method::DELETE,
        "/v1/budgets/{id}",
        format!("/v1/budgets/{bid}"),
        admin.clone(),
        None,
        204,
    )
    .await;
    // A device registers its key with its device-bound token (201), then again (200).
    let device_token = apiary_ingest::store::admin::create_token(
        &app.pool,
        &apiary_ingest::store::admin::TokenSpec {
            tenant: t.id.to_string(),
            scopes: vec![apiary_ingest::auth::Scope::Ingest],
            user_id: Some("alice".into()),
            device_id: Some("alice-desk".into()),
        },
    )
    .await
    .unwrap()
    .1;
    let key = apiary_schema::device_key::SigningKey::from_seed(&[4; 32]);
    let public = key.public();
    let registration = json!({
        "public_key": public.to_text(),
        "proof": key.sign(&apiary_schema::device_key::registration_message(
            &t.id.to_string(), "alice-desk", &public)),
    });
    for want in [201, 200] {
        let body = exchange(
            Method::POST,
            "/v1/devices/key",
            "/v1/devices/key".into(),
            device_token.clone(),
            Some(registration.clone()),
            want,
        )
        .await;
        assert_eq!(body["fingerprint"], public.fingerprint(), "{body}");
    }
    for p in [
        "/v1/devices/key",
        "/v1/budgets",
        "/v1/budgets/{id}",
        "/v1/alerts",
        "/v1/alerts/destinations",
        "/v1/alerts/destinations/{id}",
        "/v1/alerts/rules",
        "/v1/alerts/rules/{id}",
        "/v1/exports",
        "/v1/exports/{id}",
    ] {
        documented.insert(p);
    }
    let (_, colonies) = app.get(&t.read, "/v1/colonies").await;
    assert_eq!(colonies["colonies"][0]["label"], "Billing", "{colonies}");
    assert_eq!(colonies["colonies"][0]["workers"], 1, "{colonies}");
    // The answers had something in them (a schema is no test of an empty list).
    let (_, tree) = app.get(&t.read, "/v1/sessions/q1/tree").await;
    assert_eq!(
        tree["colonies"][0]["workers"][0]["session_id"], "w1",
        "{tree}"
    );
    let (_, devices) = app.get(&t.read, "/v1/devices").await;
    assert_eq!(devices["devices"][0]["backlog_events"], 3, "{devices}");
    let (_, q1) = app.get(&t.read, "/v1/sessions/q1").await;
    assert_eq!(q1["task_list"][0]["task_id"], "1", "{q1}");
    assert_eq!(q1["triggers"][0]["state"], "activated", "{q1}");
    assert!(q1["next_wake_at"].is_string(), "{q1}");
    assert_eq!(q1["activity"]["tool_name"], "grep", "{q1}");

    // Every JSON path of the document was called (`/metrics` and `/v1/metrics` are text, checked below
    // and in the black-box tests; `/v1/stream` is
    // text/event-stream, checked against its data schemas in `stream.rs`).
    let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
    for p in paths {
        assert!(
            documented.contains(p.as_str())
                || p == "/v1/batches"
                || p == "/metrics"
                || p == "/v1/metrics"
                || p == "/v1/stream",
            "{p} was not exercised"
        );
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_tampered_answer_fails_the_schema(pool: sqlx::PgPool) {
    // The conformance check above can fail: a field of the wrong type is caught.
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let doc: Value = app.get(&t.read, "/openapi.json").await.1;
    let (_, mut usage) = app.get(&t.read, "/v1/usage?group_by=user").await;
    let pointer = schema_pointer(&doc, "/v1/usage", "get", 200);
    let mut root = doc.clone();
    root["$ref"] = json!(format!("#{pointer}"));
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&root)
        .unwrap();
    assert!(validator.is_valid(&usage));
    usage["totals"]["events"] = json!("seven");
    assert!(!validator.is_valid(&usage));
}

/// One sample line of the Prometheus text format: `name{labels} value`.
fn sample(line: &str) -> Option<(&str, f64)> {
    let (series, value) = line.rsplit_once(' ')?;
    let name = series.split('{').next()?;
    let ok_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    let value = match value {
        "+Inf" => f64::INFINITY,
        v => v.parse().ok()?,
    };
    ok_name.then_some((series, value))
}

#[sqlx::test(migrations = "../migrations")]
async fn metrics_parse_as_prometheus_text_with_the_dashboard_series(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let (s, _) = app
        .post_batch(
            &t.ingest,
            &batch(vec![tool("q1", Utc::now(), false)], vec![]),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let r = app
        .client
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .unwrap();
    let content_type = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = r.text().await.unwrap();
    let mut types = std::collections::BTreeMap::new();
    let mut samples = std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_string(), kind.to_string());
        } else if line.starts_with('#') {
            continue;
        } else {
            let (series, value) = sample(line).unwrap_or_else(|| panic!("not a sample: {line:?}"));
            samples.insert(series.to_string(), value);
        }
    }
    for (family, kind) in [
        ("apiary_ingest_batches", "counter"),
        ("apiary_ingest_events_accepted", "counter"),
        ("apiary_ingest_events_duplicate", "counter"),
        ("apiary_ingest_events_rejected", "counter"),
        ("apiary_ingest_batches_refused", "counter"),
        ("apiary_ingest_rate_limited", "counter"),
        ("apiary_ingest_batch_duration_seconds", "histogram"),
    ] {
        assert_eq!(types.get(family).map(String::as_str), Some(kind), "{text}");
    }
    assert_eq!(samples["apiary_ingest_batches_total"], 1.0, "{text}");
    assert_eq!(
        samples["apiary_ingest_events_accepted_total"], 1.0,
        "{text}"
    );
    assert_eq!(samples["apiary_ingest_batch_duration_seconds_count"], 1.0);
    assert_eq!(
        samples["apiary_ingest_batch_duration_seconds_bucket{le=\"+Inf\"}"],
        1.0
    );
    assert!(samples.contains_key("apiary_ingest_batch_duration_seconds_bucket{le=\"0.005\"}"));
}
