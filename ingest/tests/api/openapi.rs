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

/// Who sends a [`Step`]: the tenant's read token, its admin token, or a device-bound ingest token.
#[derive(Debug, Clone, Copy)]
enum Who {
    Read,
    Admin,
    Device,
}

/// One request of the writes-and-reads table: `path` is the document's, `url` (and `body`) may name an
/// id kept from an earlier answer (`{bid}`), `keep` keeps a field of this answer as such an id.
struct Step {
    method: &'static str,
    path: &'static str,
    url: String,
    who: Who,
    body: Option<Value>,
    want: u16,
    keep: Option<(&'static str, &'static str)>,
}

impl Step {
    fn new(method: &'static str, path: &'static str, url: &str, who: Who, want: u16) -> Step {
        Step {
            method,
            path,
            url: url.to_string(),
            who,
            body: None,
            want,
            keep: None,
        }
    }

    fn body(mut self, body: &Value) -> Step {
        self.body = Some(body.clone());
        self
    }

    fn keep(mut self, id: &'static str, field: &'static str) -> Step {
        self.keep = Some((id, field));
        self
    }
}

/// Runs [`Step`]s in order: each answer's status must be the one wanted and its body must match the
/// document's schema for it; a 2xx marks its path exercised.
struct Steps<'a> {
    app: &'a TestApp,
    doc: &'a Value,
    /// By [`Who`]: read, admin, device.
    tokens: [String; 3],
    ids: std::collections::HashMap<&'static str, String>,
    /// The last answer of each `METHOD path`.
    answers: std::collections::HashMap<String, Value>,
    /// The document's paths answered with a 2xx.
    documented: std::collections::BTreeSet<&'static str>,
}

impl Steps<'_> {
    /// `text` with each kept id's `{name}` replaced.
    fn fill(&self, text: &str) -> String {
        self.ids.iter().fold(text.to_string(), |t, (name, id)| {
            t.replace(&format!("{{{name}}}"), id)
        })
    }

    async fn all(&mut self, steps: Vec<Step>) {
        for step in steps {
            let url = self.fill(&step.url);
            let method = reqwest::Method::from_bytes(step.method.as_bytes()).unwrap();
            let token = &self.tokens[step.who as usize];
            let mut req = self
                .app
                .client
                .request(method, format!("{}{url}", self.app.base))
                .bearer_auth(token);
            if let Some(b) = &step.body {
                let b: Value = serde_json::from_str(&self.fill(&b.to_string())).unwrap();
                req = req.json(&b);
            }
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            let what = format!("{} {url} as {:?} ({status})", step.method, step.who);
            assert_eq!(status, step.want, "{what}: {text}");
            let body = if status == 204 {
                assert!(text.is_empty(), "{what}: {text}");
                Value::Null
            } else {
                let body: Value = serde_json::from_str(&text).unwrap();
                let m = step.method.to_ascii_lowercase();
                check(
                    self.doc,
                    &what,
                    &schema_pointer(self.doc, step.path, &m, status),
                    &body,
                );
                body
            };
            if (200..300).contains(&status) {
                self.documented.insert(step.path);
            }
            if let Some((id, field)) = step.keep {
                let value = body[field]
                    .as_str()
                    .unwrap_or_else(|| panic!("{what}: no {field}"));
                self.ids.insert(id, value.to_string());
            }
            self.answers
                .insert(format!("{} {}", step.method, step.path), body);
        }
    }

    /// The last answer of `METHOD path`.
    fn answer(&self, call: &str) -> &Value {
        self.answers
            .get(call)
            .unwrap_or_else(|| panic!("no answer of {call}"))
    }
}

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
    // Every write, refused to a read token where it needs the admin's, and the reads that show it:
    // one table of steps, each answer checked against the document.
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
    let device = apiary_ingest::store::admin::create_token(
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
    let mut run = Steps {
        app: &app,
        doc: &doc,
        tokens: [t.read.clone(), admin, device],
        ids: Default::default(),
        answers: Default::default(),
        documented: Default::default(),
    };
    use Who::{Admin, Read};
    let label = json!({ "label": "Billing" });
    let price = json!({"models": ["m*"], "from": "2026-01-01", "input": "1.00", "output": "2.00",
        "tiers": [{"above_input_tokens": 200000, "input": "2.00", "output": "4.00"}]});
    let budget =
        json!({"name": "team", "period": "month", "tz": "Europe/Berlin", "limit_usd": "0.40"});
    let label_url = format!("/v1/colonies/{COLONY_KEY}/label");
    let reprice = "/v1/prices/reprice?from=2026-01-01&to=2026-02-01";
    run.all(vec![
        Step::new("PUT", "/v1/colonies/{key}/label", &label_url, Read, 403).body(&label),
        Step::new("PUT", "/v1/colonies/{key}/label", &label_url, Admin, 200).body(&label),
        Step::new("PUT", "/v1/tenant/settings", "/v1/tenant/settings", Read, 403)
            .body(&json!({ "colony_names": "names" })),
        Step::new("PUT", "/v1/tenant/settings", "/v1/tenant/settings", Admin, 200)
            .body(&json!({ "colony_names": "names" })),
        Step::new("POST", "/v1/prices", "/v1/prices", Read, 403).body(&price),
        Step::new("POST", "/v1/prices", "/v1/prices", Admin, 200).body(&price),
        Step::new("GET", "/v1/prices", "/v1/prices", Read, 200),
        Step::new("POST", "/v1/prices/reprice", reprice, Read, 403),
        Step::new("POST", "/v1/prices/reprice", reprice, Admin, 200),
        Step::new("POST", "/v1/budgets", "/v1/budgets", Read, 403).body(&budget),
        Step::new("POST", "/v1/budgets", "/v1/budgets", Admin, 201)
            .body(&budget)
            .keep("bid", "budget_id"),
        Step::new("GET", "/v1/budgets", "/v1/budgets", Read, 200),
        Step::new("GET", "/v1/budgets/{id}", "/v1/budgets/{bid}", Read, 200),
        // A PUT replaces the whole budget: without a scope it is refused.
        Step::new("PUT", "/v1/budgets/{id}", "/v1/budgets/{bid}", Admin, 422)
            .body(&json!({"period": "day", "limit_tokens": 1000})),
        Step::new("PUT", "/v1/budgets/{id}", "/v1/budgets/{bid}", Admin, 200)
            .body(&json!({"scope": {}, "period": "day", "limit_tokens": 1000})),
        Step::new("PATCH", "/v1/budgets/{id}", "/v1/budgets/{bid}", Admin, 200)
            .body(&json!({"name": "renamed", "limit_tokens": 2000})),
        Step::new("POST", "/v1/alerts/destinations", "/v1/alerts/destinations", Admin, 201)
            .body(&json!({"kind": "slack", "url": "https://hooks.slack.com/services/T0/B0/x"}))
            .keep("did", "destination_id"),
        Step::new("GET", "/v1/alerts/destinations", "/v1/alerts/destinations", Admin, 200),
        Step::new("POST", "/v1/exports", "/v1/exports", Admin, 201)
            .body(&json!({"url": "https://otlp.example.com/v1/metrics", "headers": {"api-key": "k"},
                "dimensions": ["model"]}))
            .keep("eid", "export_id"),
        Step::new("GET", "/v1/exports", "/v1/exports", Admin, 200),
        Step::new("DELETE", "/v1/exports/{id}", "/v1/exports/{eid}", Admin, 204),
        Step::new("POST", "/v1/alerts/rules", "/v1/alerts/rules", Admin, 201)
            .body(&json!({"kind": "session_status", "destination_id": "{did}", "statuses": ["active",
                "waiting", "idle", "degraded", "stalled", "needs_attention", "failed", "completed"]}))
            .keep("rid", "rule_id"),
        Step::new("GET", "/v1/alerts/rules", "/v1/alerts/rules", Read, 200),
    ])
    .await;
    let db = apiary_ingest::query::ReadDb::new(
        app.pool.clone(),
        apiary_ingest::status::rules(&test_settings()),
    );
    let fired = apiary_ingest::alerts::evaluate::tenant(&app.pool, &db, t.id, 180, Utc::now())
        .await
        .unwrap();
    assert!(fired.fired > 0, "{fired:?}");
    // A device registers its key with its device-bound token (201), then again (200).
    let key = apiary_schema::device_key::SigningKey::from_seed(&[4; 32]);
    let public = key.public();
    let registration = json!({
        "public_key": public.to_text(),
        "proof": key.sign(&apiary_schema::device_key::registration_message(
            &t.id.to_string(), "alice-desk", &public)),
    });
    run.all(vec![
        Step::new("GET", "/v1/alerts", "/v1/alerts", Read, 200),
        Step::new(
            "DELETE",
            "/v1/alerts/rules/{id}",
            "/v1/alerts/rules/{rid}",
            Admin,
            204,
        ),
        Step::new(
            "DELETE",
            "/v1/alerts/destinations/{id}",
            "/v1/alerts/destinations/{did}",
            Admin,
            204,
        ),
        Step::new(
            "DELETE",
            "/v1/budgets/{id}",
            "/v1/budgets/{bid}",
            Admin,
            204,
        ),
        Step::new(
            "POST",
            "/v1/devices/key",
            "/v1/devices/key",
            Who::Device,
            201,
        )
        .body(&registration),
    ])
    .await;
    assert_eq!(
        run.answer("POST /v1/devices/key")["fingerprint"],
        public.fingerprint()
    );
    run.all(vec![Step::new(
        "POST",
        "/v1/devices/key",
        "/v1/devices/key",
        Who::Device,
        200,
    )
    .body(&registration)])
        .await;
    assert_eq!(
        run.answer("POST /v1/devices/key")["fingerprint"],
        public.fingerprint()
    );
    // The answers said what was done.
    let prices = run.answer("GET /v1/prices");
    assert_eq!(prices["prices"][0]["owner"], "tenant", "{prices}");
    let list = run.answer("GET /v1/budgets");
    assert_eq!(list["budgets"][0]["crossed"][0]["threshold"], 50, "{list}");
    // The URL is answered once, at creation; the document says so too.
    let (dest, listed) = (
        run.answer("POST /v1/alerts/destinations"),
        run.answer("GET /v1/alerts/destinations"),
    );
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
    let (export, listed) = (
        run.answer("POST /v1/exports"),
        run.answer("GET /v1/exports"),
    );
    assert_eq!(export["headers"]["api-key"], "k");
    assert!(listed["exports"][0].get("headers").is_none(), "{listed}");
    let alerts = run.answer("GET /v1/alerts");
    assert_eq!(
        alerts["alerts"][0]["notifications"][0]["event"], "firing",
        "{alerts}"
    );
    documented.extend(run.documented.iter().copied());
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
        ("apiary_ingest_batches_overloaded", "counter"),
        ("apiary_ingest_batches_over_token_share", "counter"),
        ("apiary_ingest_batch_duration_seconds", "histogram"),
        ("apiary_ingest_batches_in_flight_bound", "gauge"),
        ("apiary_ingest_push_interval_seconds", "gauge"),
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
