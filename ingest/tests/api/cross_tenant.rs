//! Another tenant's data is never visible, not even its existence, on every read endpoint and id kind.

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

#[sqlx::test(migrations = "../migrations")]
async fn no_read_endpoint_shows_another_tenants_data(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let a = app.tenant("a").await;
    let b = app.tenant("b").await;
    let now = Utc::now();
    let mut worker = tool("w-a", now, true);
    worker["colony_id"] = json!("q-a");
    worker["parent_session_id"] = json!("q-a");
    worker["agent_role"] = json!("worker");
    let (s, _) = app
        .post_batch(
            &a.ingest,
            &batch(
                vec![llm("q-a", now, "m-a", 5, 5, 1.0), worker],
                vec![binding("q-a", "alice")],
            ),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    for path in [
        "/v1/sessions/q-a",
        "/v1/sessions/q-a/usage",
        "/v1/sessions/q-a/tree",
        "/v1/sessions/w-a",
        "/v1/sessions/w-a/tree",
        "/v1/colonies/q-a/usage",
    ] {
        let (s, v) = app.get(&b.read, path).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}: {v}");
        let (s2, v2) = app.get(&b.read, &path.replace("-a", "-never")).await;
        assert_eq!(
            (s, &v),
            (s2, &v2),
            "{path}: unknown and foreign ids must look the same"
        );
        let (s, _) = app.get(&a.read, path).await;
        assert_eq!(s, StatusCode::OK, "{path} for its own tenant");
    }
    let (_, v) = app
        .get(
            &b.read,
            "/v1/usage?group_by=user,model,colony,session,device&granularity=hour",
        )
        .await;
    assert_eq!(v["rows"], json!([]));
    assert_eq!(v["totals"]["events"], 0);
    let (_, v) = app.get(&b.read, "/v1/devices").await;
    assert_eq!(v["devices"], json!([]));
    let (_, v) = app.get(&b.read, "/v1/sessions").await;
    assert_eq!(v["sessions"], json!([]), "{v}");
    let (_, v) = app.get(&a.read, "/v1/sessions").await;
    assert_eq!(v["sessions"].as_array().unwrap().len(), 2, "{v}");
    // Grouped by tenant, a tenant's token sees its own tenant: here, nothing.
    let (s, v) = app.get(&b.read, "/v1/usage?group_by=tenant").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["rows"], json!([]), "{v}");
}

#[sqlx::test(migrations = "../migrations")]
async fn the_same_ids_in_two_tenants_stay_apart(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let a = app.tenant("a").await;
    let b = app.tenant("b").await;
    let now = Utc::now();
    let shared = llm("q1", now, "m", 10, 1, 0.25);
    // The very same event (same event_id) in both tenants: each stores its own copy.
    assert_eq!(
        app.post_batch(&a.ingest, &batch(vec![shared.clone()], vec![]))
            .await
            .1["accepted"],
        1
    );
    assert_eq!(
        app.post_batch(
            &b.ingest,
            &batch(vec![shared.clone(), llm("q1", now, "m", 7, 1, 0.0)], vec![])
        )
        .await
        .1["accepted"],
        2
    );
    let (_, va) = app.get(&a.read, "/v1/sessions/q1").await;
    let (_, vb) = app.get(&b.read, "/v1/sessions/q1").await;
    assert_eq!(va["totals"]["input_tokens"], 10);
    assert_eq!(vb["totals"]["input_tokens"], 17);
    assert_eq!(vb["totals"]["unpriced_turns"], 1);
    let (_, va) = app.get(&a.read, "/v1/devices").await;
    assert_eq!(va["devices"].as_array().unwrap().len(), 1);
    // An admin token administers its own tenant: grouped by tenant it sees that one row.
    let admin = app.token(a.id, &["admin"]).await;
    for path in [
        "/v1/usage?group_by=tenant",
        "/v1/usage?group_by=tenant,user,session,device,model,colony",
        "/v1/usage",
    ] {
        let (s, v) = app.get(&admin, path).await;
        assert_eq!(s, StatusCode::OK, "{path}: {v}");
        assert_eq!(v["totals"]["input_tokens"], 10, "{path}: {v}");
        let foreign = b.id.to_string();
        assert!(!v.to_string().contains(&foreign), "{path}: {v}");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn an_operator_token_reads_usage_per_tenant_and_nothing_else(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let a = app.tenant("a").await;
    let b = app.tenant("b").await;
    let now = Utc::now();
    for (t, tokens) in [(&a, 10), (&b, 7)] {
        let (s, _) = app
            .post_batch(
                &t.ingest,
                &batch(vec![llm("q1", now, "m", tokens, 1, 0.1)], vec![]),
            )
            .await;
        assert_eq!(s, StatusCode::OK);
    }
    let (_, operator) = apiary_ingest::store::admin::create_operator_token(&app.pool, "billing")
        .await
        .unwrap();
    assert!(operator.starts_with("apo_"));
    let (s, v) = app.get(&operator, "/v1/usage?group_by=tenant,model").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // (Rows of active time alone, under model null, are left out.)
    let mut rows: Vec<(String, i64)> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["events"] != 0)
        .map(|r| {
            (
                r["tenant_id"].as_str().unwrap().into(),
                r["input_tokens"].as_i64().unwrap(),
            )
        })
        .collect();
    rows.sort();
    let mut want = vec![(a.id.to_string(), 10), (b.id.to_string(), 7)];
    want.sort();
    assert_eq!(rows, want);
    for path in [
        "/v1/usage",
        "/v1/usage?group_by=model",
        "/v1/usage?group_by=tenant,user",
        "/v1/usage?group_by=tenant,session",
        "/v1/usage?group_by=tenant,device",
        "/v1/usage?group_by=tenant,colony",
    ] {
        let (s, v) = app.get(&operator, path).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("group_by"),
            "{v}"
        );
    }
    for path in [
        "/v1/sessions",
        "/v1/sessions/q1",
        "/v1/sessions/q1/tree",
        "/v1/colonies/q1/usage",
        "/v1/devices",
    ] {
        let (s, v) = app.get(&operator, path).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{path}: {v}");
        assert_eq!(v["error"]["code"], "forbidden", "{v}");
    }
    let (s, _) = app
        .post_batch(
            &operator,
            &batch(vec![llm("q1", now, "m", 1, 1, 0.1)], vec![]),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    // A token of neither kind, or an operator-looking one that was never made, is unknown.
    for bogus in [
        "apo_0000",
        "not-a-token",
        &a.read.replacen("apy_", "apo_", 1),
    ] {
        let (s, _) = app.get(bogus, "/v1/usage?group_by=tenant").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{bogus}");
    }
}

/// The events the ingest logs (target `apiary_ingest…`) on this thread, each as `name=value` text.
struct CaptureLogs(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

struct FieldText(String);

impl tracing::field::Visit for FieldText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl tracing::Subscriber for CaptureLogs {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        m.target().starts_with("apiary_ingest")
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut text = FieldText(String::new());
        e.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Every cross-tenant read is logged with the operator token that made it (the audit line).
#[sqlx::test(migrations = "../migrations")]
async fn an_operator_read_is_logged_with_its_token(pool: sqlx::PgPool) {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    // The test's runtime has one thread, which the served requests run on too.
    let _logs = tracing::subscriber::set_default(CaptureLogs(lines.clone()));
    let app = spawn_app(pool).await;
    let (token_id, operator) =
        apiary_ingest::store::admin::create_operator_token(&app.pool, "billing")
            .await
            .unwrap();
    let (s, v) = app.get(&operator, "/v1/usage?group_by=tenant").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let lines = lines.lock().unwrap();
    let audit: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("operator usage read"))
        .collect();
    assert_eq!(audit.len(), 1, "{lines:?}");
    assert!(
        audit[0].contains(&format!("operator_token={token_id}")),
        "{}",
        audit[0]
    );
}
