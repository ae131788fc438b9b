//! Isolation, generated from the routes the ingest serves rather than from a list someone keeps: every
//! path and method of the served `/openapi.json`, and every route of the dashboard's router (read from
//! its source, `ingest/src/dashboard/mod.rs`), is called with each of tenant B's credentials — its
//! ingest tokens (bound to a user, bound to a user named like tenant A's, unbound), its read and admin
//! tokens, an operator token, each as a bearer token and as the dashboard's cookie — aimed at tenant A's
//! ids. Then:
//! - a route whose path names one of A's ids answers 403 or 404 (or the dashboard's sign-in redirect);
//! - no answer carries anything of A's (every value A stored holds [`MARK`], or is A's tenant id);
//! - every row of every table with a `tenant_id` column (listed from `information_schema`, so a table
//!   added later is covered) reads the same for A afterwards as before.
//!
//! A route added later is covered without anyone remembering to: its path parameters must be fillable
//! from [`path_value`] and its request body from [`bodies`], or the test fails naming it. And every
//! read is first made as A's own admin, which must see A's marker there (or the route is listed in
//! [`READS_NOTHING_OF_A_TENANT`]), so a query that finds nothing for anyone cannot pass for isolation.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};
use tests::isolation::{self, binding, body, failed, stalled, turn, worker_turn};
use tests::receiver::{Mode, Receiver};
use tests::stack::{Api, Cloud, Ingest};

/// In every value tenant A stores: an answer to B that holds it leaks A's data.
const MARK: &str = "zq7acme";
const QUEEN: &str = "session_zq7acme_queen";
const WORKER: &str = "session_zq7acme_worker";
const STALLED: &str = "session_zq7acme_stalled";
/// A's colony (a key like a device derives it).
const COLONY_KEY: &str = "ck_a7ace0123456789abcdef0123456789a";
/// A's session of today, whose spend crosses A's budget.
const SPENT: &str = "session_zq7acme_spent";
const DEVICE: &str = "zq7acme-laptop";
/// A's session ids that B's batch names too (so B has sessions of these ids, legitimately).
const SHARED_IDS: [&str; 2] = [QUEEN, WORKER];

/// When A's events of [`SHARED_IDS`] happened: an instant B's own rows never show (17 days ago, at a
/// second no bucket starts at).
fn a_at() -> chrono::DateTime<chrono::Utc> {
    let day = (chrono::Utc::now() - chrono::TimeDelta::days(17)).date_naive();
    day.and_hms_opt(3, 17, 29).unwrap().and_utc()
}

/// What of A's an answer to B shows, if anything.
fn leak(text: &str, tenant: &str) -> Option<String> {
    let mut t = text.to_string();
    for id in SHARED_IDS {
        t = t.replace(id, "");
    }
    let at = a_at().format("%Y-%m-%dT%H:%M:%S").to_string();
    let found = [MARK, tenant, at.as_str()]
        .into_iter()
        .find(|m| t.contains(m))
        .map(|m| format!("{m:?} in {text:.600}"));
    found
}
const MODEL_PRICE: &str = "claude-sonnet-4-5*";

/// Routes whose answer holds nothing of any tenant, with the reason (A's own read of them is not
/// required to show A's marker).
const READS_NOTHING_OF_A_TENANT: &[(&str, &str)] = &[
    ("/healthz", "liveness only"),
    ("/readyz", "readiness only"),
    ("/metrics", "process-wide counters, no tenant label"),
    ("/openapi.json", "the document itself"),
    ("/sign-in", "the form"),
    ("/assets/app.css", "a static file"),
    ("/assets/live.js", "a static file"),
    (
        "/v1/exports",
        "an export lists its id, host and fingerprint: no name or path to carry A's marker (A's export \
         is aimed at by id, and its row is in the snapshot)",
    ),
    (
        "/exports",
        "the dashboard's page of /v1/exports: ids, hosts and fingerprints only (A's export is aimed at \
         by id, and its row is in the snapshot)",
    ),
    (
        "/v1/tenant/settings",
        "one choice (keys or names), no value of A's; a write to A's shows in the rows' snapshot",
    ),
];

/// What tenant A holds, by the ids a path can name.
struct Victim {
    tenant: String,
    budget: String,
    destination: String,
    rule: String,
    colony_key: String,
    export: String,
}

/// The value of A's that fills path parameter `param` of `path` (the API's and the dashboard's).
fn path_value(v: &Victim, path: &str, param: &str) -> Option<String> {
    let s = |x: &str| Some(x.to_string());
    match (path, param) {
        ("/v1/colonies/{id}/usage", "id") => s(QUEEN),
        ("/v1/colonies/{key}/label", "key") => s(&v.colony_key),
        (p, "id") if p.starts_with("/v1/sessions/{id}") || p == "/sessions/{id}" => s(QUEEN),
        ("/v1/budgets/{id}", "id") => s(&v.budget),
        ("/v1/alerts/destinations/{id}", "id") => s(&v.destination),
        ("/v1/alerts/rules/{id}", "id") => s(&v.rule),
        ("/v1/exports/{id}", "id") | ("/exports/{id}/delete", "id") => s(&v.export),
        _ => None,
    }
}

/// The query strings each read is tried with ("" always): the ones that reach furthest into a tenant.
fn queries(path: &str) -> Vec<String> {
    let mut q = vec![String::new()];
    match path {
        "/v1/usage" | "/usage.csv" => q.extend([
            "group_by=tenant,user,session,device,model,colony".to_string(),
            "group_by=session&granularity=hour".to_string(),
        ]),
        "/v1/stream" | "/live" => q.push("after=0-0".to_string()),
        "/v1/metrics" => q.push("group_by=user,device,colony".to_string()),
        "/v1/status/transitions" => q.push("status=failed,stalled".to_string()),
        "/v1/prices/reprice" => q.clear(),
        _ => {}
    }
    q
}

/// Values for required query parameters, by name.
fn required_query(name: &str) -> Option<String> {
    let tomorrow = (chrono::Utc::now() + chrono::TimeDelta::days(1)).format("%Y-%m-%d");
    match name {
        "from" => Some("2026-01-01".to_string()),
        "to" => Some(tomorrow.to_string()),
        _ => None,
    }
}

/// The bodies each write is tried with (B's own tenant, naming A's ids and values wherever it can).
fn bodies(v: &Victim, hook: &str, method: &str, path: &str) -> Option<Vec<Value>> {
    let budget =
        json!({"name": "b", "scope": {}, "period": "day", "limit_usd": "1", "thresholds": [50]});
    let b = match (method, path) {
        ("post", "/v1/batches") => {
            let events = [
                turn(QUEEN, 9_000),
                worker_turn("session_globex_worker", QUEEN, 9_000),
                failed(QUEEN),
                stalled(WORKER),
            ];
            let batch = body(&events, &[binding(QUEEN, 1)], "globex-laptop");
            vec![serde_json::from_slice(&batch).unwrap()]
        }
        ("post", "/v1/prices") => vec![json!({
            "models": [MODEL_PRICE], "from": "2026-01-01", "input": "900.00", "output": "900.00",
        })],
        ("post", "/v1/budgets") => vec![
            budget.clone(),
            json!({"name": "b", "period": "day", "limit_usd": "1",
                   "scope": {"session_id": QUEEN}}),
        ],
        ("put", "/v1/budgets/{id}") => vec![budget],
        ("patch", "/v1/budgets/{id}") => vec![json!({"name": "taken", "limit_usd": "1000"})],
        ("post", "/v1/alerts/destinations") => {
            vec![json!({"kind": "webhook", "url": hook, "name": "b"})]
        }
        ("post", "/v1/alerts/rules") => vec![
            json!({"kind": "budget", "destination_id": v.destination, "budget_id": v.budget}),
            json!({"kind": "session_status", "destination_id": v.destination,
                   "statuses": ["failed"]}),
        ],
        ("post", "/v1/exports") => vec![json!({"url": hook, "dimensions": ["user"]})],
        ("put", "/v1/colonies/{key}/label") => vec![json!({"label": "taken"})],
        ("put", "/v1/tenant/settings") => vec![json!({"colony_names": "names"})],
        ("post", "/v1/devices/key") => vec![json!({"public_key": "AAAA", "proof": "AAAA"})],
        _ => return None,
    };
    Some(b)
}

/// One credential of tenant B (or the operator's), as a bearer token or as the dashboard's cookie.
#[derive(Clone)]
struct Credential {
    name: String,
    token: String,
}

/// A request and what came back (the body read for at most two seconds: streams stay open).
async fn call(
    base: &str,
    method: &str,
    path_and_query: &str,
    token: &str,
    cookie: bool,
    body: Option<&Value>,
) -> (u16, String) {
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    let mut req = http
        .request(m, format!("{base}{path_and_query}"))
        .header("Last-Event-ID", "0-0")
        // The dashboard's forms are same-origin only: look like one.
        .header("Origin", base)
        .header("Sec-Fetch-Site", "same-origin");
    req = if cookie {
        req.header("Cookie", format!("{}={token}", "apiary_dash"))
    } else {
        req.bearer_auth(token)
    };
    if let Some(b) = body {
        req = req.json(b);
    }
    let mut r = match req.send().await {
        Ok(r) => r,
        Err(e) => return (0, format!("not answered: {e}")),
    };
    let status = r.status().as_u16();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, r.chunk()).await {
        out.extend_from_slice(&chunk);
    }
    (status, String::from_utf8_lossy(&out).into_owned())
}

/// `(method, path template, required query names, has body)` of every operation in the document.
fn api_routes(doc: &Value) -> Vec<(String, String, Vec<String>, bool)> {
    let mut out = vec![];
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().unwrap() {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let required = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query" && p["required"] == true)
                .map(|p| p["name"].as_str().unwrap().to_string())
                .collect();
            out.push((
                method.clone(),
                path.clone(),
                required,
                op.get("requestBody").is_some(),
            ));
        }
    }
    out
}

/// `(method, path)` of every route of the dashboard's router, read from its source.
fn dashboard_routes() -> Vec<(String, String)> {
    let src = include_str!("../../ingest/src/dashboard/mod.rs");
    let router = src
        .split("pub fn router()")
        .nth(1)
        .expect("the dashboard's router function");
    let mut out = vec![];
    for route in router.split(".route(\"").skip(1) {
        let (path, rest) = route.split_once('"').unwrap();
        let call = &rest[..rest.find("))").map_or(rest.len(), |i| i + 2)];
        for m in ["get", "post", "put", "patch", "delete"] {
            if call.contains(&format!("{m}(")) {
                out.push((m.to_string(), path.to_string()));
            }
        }
    }
    assert!(
        out.len() >= 10,
        "the dashboard's routes were not found in its source: {out:?}"
    );
    out
}

/// Fills `{param}`s of `template` from A's ids; the names of those nothing fills.
fn fill(v: &Victim, template: &str) -> Result<String, Vec<String>> {
    let mut path = template.to_string();
    let mut missing = vec![];
    for part in template.split('{').skip(1) {
        let name = part.split('}').next().unwrap();
        match path_value(v, template, name) {
            Some(val) => path = path.replace(&format!("{{{name}}}"), &val),
            None => missing.push(name.to_string()),
        }
    }
    if missing.is_empty() {
        Ok(path)
    } else {
        Err(missing)
    }
}

/// Every row of tenant `tenant` in every table with a `tenant_id` column, as text, per table.
async fn snapshot(db: &sqlx::PgPool, tenant: &str) -> BTreeMap<String, Vec<String>> {
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT c.table_name::text FROM information_schema.columns c
           JOIN pg_class k ON k.relname = c.table_name AND k.relnamespace = 'public'::regnamespace
          WHERE c.table_schema = 'public' AND c.column_name = 'tenant_id' AND NOT k.relispartition
            AND k.relkind IN ('r', 'p')
          ORDER BY 1",
    )
    .fetch_all(db)
    .await
    .unwrap();
    assert!(tables.len() >= 20, "tenant tables: {tables:?}");
    let mut out = BTreeMap::new();
    for (t,) in tables {
        let rows: Vec<(String,)> = sqlx::query_as(&format!(
            "SELECT x::text FROM {t} x WHERE tenant_id::text = $1 ORDER BY 1"
        ))
        .bind(tenant)
        .fetch_all(db)
        .await
        .unwrap();
        out.insert(t, rows.into_iter().map(|r| r.0).collect());
    }
    out
}

async fn post_json(api: &Api, path: &str, body: Value) -> Value {
    let (status, text) = call(&api.base, "post", path, &api.token, false, Some(&body)).await;
    assert!((200..300).contains(&status), "POST {path}: {status} {text}");
    serde_json::from_str(&text).unwrap()
}

/// Tenant A's rows: turns (estimated, so a re-price could change them), a worker in its colony, a
/// failed and a stalled session, a budget, a destination, two rules, an alert delivered, a colony
/// label, a tenant price.
async fn seed_victim(cloud: &Cloud, ingest: &Ingest, hook: &str, receiver: &Receiver) -> Victim {
    let unreported = |mut e: Value| {
        let d = e["data"].as_object_mut().unwrap();
        d.remove("cost_usd");
        d.remove("cost_source");
        e
    };
    let alice = Api::new(&ingest.url(), &cloud.tenant.ingest_token);
    let at = |mut e: Value| {
        e["occurred_at"] = json!(a_at());
        e
    };
    let events = [
        at(unreported(turn(QUEEN, 1_000))),
        at(unreported(worker_turn(WORKER, QUEEN, 2_000))),
        at(failed(QUEEN)),
        at(stalled(WORKER)),
        at(json!({
            "schema_version": 1, "event_id": uuid::Uuid::new_v4(), "type": "colony.created",
            "occurred_at": chrono::Utc::now(), "runtime": "hive", "native_type": "colony_created",
            "session_id": QUEEN, "agent_role": "queen",
            "data": { "source": "created", "colony_id": QUEEN, "queen_session_id": QUEEN,
                      "colony_key": COLONY_KEY },
        })),
        unreported(turn(SPENT, 3_000)),
        failed(SPENT),
        stalled(STALLED),
    ];
    let mut first = binding(QUEEN, 5);
    first["first_seen_at"] = json!(a_at());
    let (status, v) = alice
        .post_batch(&body(&events, &[first], DEVICE))
        .await
        .unwrap();
    assert_eq!((status, isolation::verdicts(&v).0), (200, 8), "{v}");
    let admin = Api::new(&ingest.url(), &cloud.tenant.admin_token);
    let id = |v: &Value, field: &str| v[field].as_str().unwrap().to_string();
    let budget = post_json(
        &admin,
        "/v1/budgets",
        json!({"name": format!("{MARK} budget"), "period": "day", "limit_usd": "0.000001",
               "thresholds": [50]}),
    )
    .await;
    let destination = post_json(
        &admin,
        "/v1/alerts/destinations",
        json!({"kind": "webhook", "url": hook, "name": format!("{MARK} hook")}),
    )
    .await;
    let (budget, destination) = (id(&budget, "budget_id"), id(&destination, "destination_id"));
    // Sent once, at creation: a day's interval, so the sender's own bookkeeping of a later send does not
    // change A's row while the test runs.
    let export = post_json(
        &admin,
        "/v1/exports",
        json!({"url": hook, "dimensions": ["user"], "interval_secs": 86_400}),
    )
    .await;
    let export = id(&export, "export_id");
    let rule = post_json(
        &admin,
        "/v1/alerts/rules",
        json!({"kind": "session_status", "destination_id": destination,
               "statuses": ["failed"], "name": format!("{MARK} rule")}),
    )
    .await;
    post_json(
        &admin,
        "/v1/alerts/rules",
        json!({"kind": "budget", "destination_id": destination, "budget_id": budget,
               "name": format!("{MARK} budget rule")}),
    )
    .await;
    post_json(
        &admin,
        "/v1/prices",
        json!({"models": [MODEL_PRICE], "from": "2026-01-01", "input": "3.00", "output": "15.00",
               "source": format!("{MARK} contract")}),
    )
    .await;
    let colonies = admin.get_ok("/v1/colonies").await.unwrap();
    let colony_key = colonies.to_string();
    let colony_key = colony_key
        .split('"')
        .find(|s| s.len() == 35 && (s.starts_with("ck_") || s.starts_with("dk_")))
        .unwrap_or_else(|| panic!("A has no colony key: {colonies}"))
        .to_string();
    let (status, text) = call(
        &admin.base,
        "put",
        &format!("/v1/colonies/{colony_key}/label"),
        &admin.token,
        false,
        Some(&json!({"label": format!("{MARK} colony")})),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    // The alerts fire and are delivered; the state settles before the snapshot.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let alerts = admin.get_ok("/v1/alerts").await.unwrap();
        let text = alerts.to_string();
        let fired = alerts["alerts"].as_array().map_or(0, |a| a.len());
        if fired >= 2 && !text.contains("\"pending\"") && receiver.received().len() >= 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "A's alerts never settled: {alerts}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Victim {
        tenant: cloud.tenant.id.clone(),
        budget,
        destination,
        rule: id(&rule, "rule_id"),
        colony_key,
        export,
    }
}

/// B's credentials: every scope, bound and unbound, and an operator token.
fn attackers(db_url: &str) -> Vec<Credential> {
    let b = isolation::tenant(db_url, "globex").unwrap();
    let mut out = vec![];
    for (name, scope, user) in [
        ("B ingest bound to gus", "ingest", Some("gus")),
        (
            "B ingest bound to a user named alice",
            "ingest",
            Some("alice"),
        ),
        ("B ingest unbound", "ingest", None),
        ("B read", "read", None),
        ("B read bound to alice", "read", Some("alice")),
        ("B admin", "admin", None),
    ] {
        out.push(Credential {
            name: name.to_string(),
            token: isolation::token(db_url, &b, scope, user, None).unwrap(),
        });
    }
    let op = tests::procs::last_line(
        &tests::stack::ingest_cli(db_url, &["operator-token", "create", "--label", "x"]).unwrap(),
    );
    out.push(Credential {
        name: "operator".to_string(),
        token: op,
    });
    out
}

/// One request to make: `(method, template, concrete path and query, body)`.
type Plan = Vec<(String, String, String, Option<Value>)>;

fn plan(v: &Victim, hook: &str, doc: &Value, unfillable: &mut Vec<String>) -> (Plan, Plan) {
    let mut api = vec![];
    for (method, template, required, has_body) in api_routes(doc) {
        let path = match fill(v, &template) {
            Ok(p) => p,
            Err(missing) => {
                unfillable.push(format!("{method} {template}: path {missing:?}"));
                continue;
            }
        };
        let mut required_q = vec![];
        for name in &required {
            match required_query(name) {
                Some(val) => required_q.push(format!("{name}={val}")),
                None => unfillable.push(format!("{method} {template}: query {name}")),
            }
        }
        let bodies: Vec<Option<Value>> = if has_body {
            match bodies(v, hook, &method, &template) {
                Some(b) => b.into_iter().map(Some).collect(),
                None => {
                    unfillable.push(format!("{method} {template}: body"));
                    continue;
                }
            }
        } else {
            vec![None]
        };
        let mut qs = queries(&template);
        if qs.is_empty() {
            qs.push(String::new());
        }
        for q in qs {
            let all: Vec<String> = required_q
                .iter()
                .cloned()
                .chain((!q.is_empty()).then_some(q))
                .collect();
            let pq = if all.is_empty() {
                path.clone()
            } else {
                format!("{path}?{}", all.join("&"))
            };
            for b in &bodies {
                api.push((method.clone(), template.clone(), pq.clone(), b.clone()));
            }
        }
    }
    let mut dash = vec![];
    for (method, template) in dashboard_routes() {
        let path = match fill(v, &template) {
            Ok(p) => p,
            Err(missing) => {
                unfillable.push(format!("dashboard {method} {template}: path {missing:?}"));
                continue;
            }
        };
        for q in queries(&template) {
            let pq = if q.is_empty() {
                path.clone()
            } else {
                format!("{path}?{q}")
            };
            dash.push((method.clone(), template.clone(), pq, None));
        }
    }
    (api, dash)
}

fn names_a_path_id(template: &str) -> bool {
    template.contains('{')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_route_refuses_another_tenants_ids_and_leaves_its_rows_alone() {
    let mut cloud = Cloud::start().await.unwrap();
    // One ingest only, with the settings below (the first would also deliver A's notifications).
    cloud.ingest.kill();
    let receiver = Receiver::start(Mode::Accept).await.unwrap();
    let ingest = Ingest::start_with(
        &cloud.db.url,
        cloud.dir.path(),
        &[
            ("APIARY_ALERTS_ALLOW_PRIVATE_DESTINATIONS", "true"),
            ("APIARY_ALERTS_EVALUATE_SECS", "1"),
            ("APIARY_ALERTS_RETRY_BASE_MS", "200"),
            ("APIARY_RATE_LIMIT_PER_SEC", "10000"),
            ("APIARY_RATE_LIMIT_BURST", "10000"),
        ],
    )
    .await
    .unwrap();
    let base = ingest.url();
    let hook = receiver.url.clone();
    let victim = seed_victim(&cloud, &ingest, &hook, &receiver).await;
    let url = cloud.db.url.clone();
    let creds = tokio::task::spawn_blocking(move || attackers(&url))
        .await
        .unwrap();
    // B has turns of its own, so a re-price of B's range has work to do.
    let b_ingest = &creds[2].token;
    let (status, v) = Api::new(&base, b_ingest)
        .post_batch(&body(&[turn("session_globex_1", 5)], &[], "globex-laptop"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{v}");

    let doc: Value = reqwest::get(format!("{base}/openapi.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut unfillable = vec![];
    let (api, dash) = plan(&victim, &hook, &doc, &mut unfillable);
    assert!(
        unfillable.is_empty(),
        "routes this test cannot aim at tenant A (teach path_value, required_query or bodies):\n{}",
        unfillable.join("\n")
    );
    assert!(api.len() >= 25, "{} API requests planned", api.len());

    // A's own reads show A's marker (through at least one of each route's queries): the reads B makes
    // below reach A's rows when not isolated.
    let mut seen: BTreeMap<(bool, String), Vec<String>> = BTreeMap::new();
    for (plan, cookie) in [(&api, false), (&dash, true)] {
        for (method, template, pq, _) in plan.iter().filter(|p| p.0 == "get") {
            let (status, text) =
                call(&base, method, pq, &cloud.tenant.admin_token, cookie, None).await;
            let shown = seen.entry((cookie, template.clone())).or_default();
            if text.contains(MARK) || text.contains(&victim.tenant) {
                shown.clear();
                shown.push(String::new());
            } else if shown.first().is_none_or(|s| !s.is_empty()) {
                shown.push(format!("GET {pq} as A's admin: {status} {text:.300}"));
            }
        }
    }
    let blind: Vec<String> = seen
        .into_iter()
        .filter(|((_, template), _)| !READS_NOTHING_OF_A_TENANT.iter().any(|(p, _)| p == template))
        .filter(|(_, shown)| shown.first().is_none_or(|s| !s.is_empty()))
        .flat_map(|(_, shown)| shown)
        .collect();
    assert!(
        blind.is_empty(),
        "A's own reads that show nothing of A (so B's reads of them prove nothing):\n{}",
        blind.join("\n")
    );

    let pool = cloud.db.pool().await.unwrap();
    let before = snapshot(&pool, &victim.tenant).await;
    let mut broken = vec![];
    let mut requests = 0;
    // Reads, writes, reads again (see the module notes).
    for pass in ["read", "write", "read again"] {
        for cred in &creds {
            for (plan, cookie) in [(&api, false), (&dash, true)] {
                let wanted = plan.iter().filter(|p| (p.0 == "get") == (pass != "write"));
                for (method, template, pq, b) in wanted {
                    let (status, text) =
                        call(&base, method, pq, &cred.token, cookie, b.as_ref()).await;
                    requests += 1;
                    let how = format!(
                        "{pass}: {} {method} {pq}{} → {status}",
                        cred.name,
                        if cookie { " (cookie)" } else { "" }
                    );
                    if let Some(what) = leak(&text, &victim.tenant) {
                        broken.push(format!("{how}: A's data in the answer: {what}"));
                    }
                    if status == 0 || status >= 500 {
                        broken.push(format!("{how}: {text:.300}"));
                    }
                    let refused = matches!(status, 401 | 403 | 404)
                        || (cookie && status == 303 && template != "/sign-in");
                    if pass != "read again" && names_a_path_id(template) && !refused {
                        broken.push(format!("{how}: A's id was not refused: {text:.300}"));
                    }
                }
            }
        }
    }
    let after = snapshot(&pool, &victim.tenant).await;
    for (table, rows) in &before {
        let now = &after[table];
        if rows != now {
            let gone: BTreeSet<_> = rows.iter().filter(|r| !now.contains(r)).collect();
            let new: BTreeSet<_> = now.iter().filter(|r| !rows.contains(r)).collect();
            broken.push(format!(
                "table {table}: A's rows changed\n  before: {gone:?}\n  after: {new:?}"
            ));
        }
    }
    eprintln!(
        "{requests} requests by {} credentials over {} API and {} dashboard requests; {} tables",
        creds.len(),
        api.len(),
        dash.len(),
        before.len()
    );
    assert!(
        broken.is_empty(),
        "tenant B reached tenant A:\n{}",
        broken.join("\n")
    );
}
