//! Isolation, tried the way an attacker holding a valid token would, against the real `apiary-ingest`
//! and Postgres:
//! - a tenant's `admin` token never reads another tenant's rows, whatever it asks (`group_by=tenant`
//!   included); the operator-wide view needs an operator token that only the command line makes;
//! - an ingest token bound to one user cannot add usage to, change the status of, attach a worker to,
//!   or take over a session of another user of the same tenant — not by naming its id, not through a
//!   parent, not by racing to be first;
//! - session bindings pass the same id rules as events' ids, count towards `max_batch_events`, and their
//!   times must lie in the accepted window.

use std::sync::Arc;

use serde_json::Value;
use tests::isolation::{self, binding, body, failed, turn, verdicts, worker_turn};
use tests::stack::{ingest_cli, Api, Cloud, Ingest};

/// Runs blocking CLI work off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> anyhow::Result<T> + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap().unwrap()
}

/// Posts a batch that must be answered 200; returns (accepted, duplicates, rejection reasons).
async fn post(
    api: &Api,
    events: &[Value],
    sessions: &[Value],
    device: &str,
) -> (u64, u64, Vec<String>) {
    let (status, v) = api
        .post_batch(&body(events, sessions, device))
        .await
        .unwrap();
    assert_eq!(status, 200, "{v}");
    verdicts(&v)
}

/// Input tokens per (user, session) that `/v1/usage` reports over the last 30 days.
async fn usage_by_user_session(api: &Api) -> Vec<(String, String, i64)> {
    let v = api.get_ok("/v1/usage?group_by=user,session").await.unwrap();
    let mut rows: Vec<(String, String, i64)> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["user_id"].as_str().unwrap_or("").to_string(),
                r["session_id"].as_str().unwrap_or("").to_string(),
                r["input_tokens"].as_i64().unwrap(),
            )
        })
        .collect();
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_admin_token_never_reads_another_tenants_rows() {
    let cloud = Cloud::start().await.unwrap();
    let url = cloud.db.url.clone();
    let (globex, globex_ingest) = blocking(move || {
        let id = isolation::tenant(&url, "globex")?;
        let t = isolation::token(&url, &id, "ingest", Some("gus"), Some("globex-laptop"))?;
        Ok((id, t))
    })
    .await;
    let globex_api = Api::new(&cloud.ingest.url(), &globex_ingest);
    let s = "session_20261103_101433_51be07d2";
    assert_eq!(
        post(
            &cloud.ingest_api(),
            &[turn(s, 100), turn(s, 100)],
            &[],
            "acme-laptop"
        )
        .await
        .0,
        2
    );
    let g = "session_globex_confidential";
    assert_eq!(
        post(&globex_api, &[turn(g, 7)], &[], "globex-laptop")
            .await
            .0,
        1
    );

    let admin = cloud.admin_api();
    let secrets = [globex.as_str(), "gus", g, "globex-laptop"];
    for path in [
        "/v1/usage?group_by=tenant",
        "/v1/usage?group_by=tenant,user,session,device,model,colony&granularity=hour",
        "/v1/usage?group_by=user,session,device",
        "/v1/sessions",
        "/v1/devices",
    ] {
        let v = admin.get_ok(path).await.unwrap();
        let text = v.to_string();
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "{path}: acme's admin token reads globex's {secret:?}: {v}"
            );
        }
    }
    // group_by=tenant on a tenant's token answers its own tenant's row.
    let v = admin.get_ok("/v1/usage?group_by=tenant").await.unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["tenant_id"], cloud.tenant.id.as_str(), "{v}");
    assert_eq!(rows[0]["input_tokens"], 200, "{v}");
    for path in [
        format!("/v1/sessions/{g}"),
        format!("/v1/sessions/{g}/tree"),
        format!("/v1/colonies/{g}/usage"),
    ] {
        let (status, v) = admin.get(&path).await.unwrap();
        assert_eq!(status, 404, "{path}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_token_made_by_the_cli_reads_usage_per_tenant_and_nothing_else() {
    let cloud = Cloud::start().await.unwrap();
    let url = cloud.db.url.clone();
    let (globex_ingest, operator) = blocking(move || {
        let id = isolation::tenant(&url, "globex")?;
        let t = isolation::token(&url, &id, "ingest", Some("gus"), None)?;
        let op = tests::procs::last_line(&ingest_cli(
            &url,
            &["operator-token", "create", "--label", "billing"],
        )?);
        Ok((t, op))
    })
    .await;
    // A server that re-checks tokens on every request, so the revocation below shows at once.
    let ingest = Ingest::start_with(
        &cloud.db.url,
        cloud.dir.path(),
        &[("APIARY_TOKEN_CACHE_SECS", "0")],
    )
    .await
    .unwrap();
    let s = "session_acme_1";
    assert_eq!(
        post(
            &Api::new(&ingest.url(), &cloud.tenant.ingest_token),
            &[turn(s, 100)],
            &[],
            "d1"
        )
        .await
        .0,
        1
    );
    assert_eq!(
        post(
            &Api::new(&ingest.url(), &globex_ingest),
            &[turn("session_globex_1", 7)],
            &[],
            "d2"
        )
        .await
        .0,
        1
    );

    let op = Api::new(&ingest.url(), &operator);
    let v = op.get_ok("/v1/usage?group_by=tenant,model").await.unwrap();
    // (Each tenant's active time has a row of its own, under model null.)
    let mut per_tenant: Vec<(String, i64)> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["events"] != 0)
        .map(|r| {
            (
                r["tenant_id"].as_str().unwrap().to_string(),
                r["input_tokens"].as_i64().unwrap(),
            )
        })
        .collect();
    per_tenant.sort_by_key(|r| r.1);
    assert_eq!(per_tenant.len(), 2, "{v}");
    assert_eq!(per_tenant[1], (cloud.tenant.id.clone(), 100), "{v}");
    assert_eq!(per_tenant[0].1, 7, "{v}");
    // Per tenant (and model) only: never a tenant's users, sessions, colonies or devices.
    for dim in ["user", "session", "device", "colony"] {
        let (status, v) = op
            .get(&format!("/v1/usage?group_by=tenant,{dim}"))
            .await
            .unwrap();
        assert_eq!(status, 400, "group_by=tenant,{dim}: {v}");
    }
    let (status, v) = op.get("/v1/usage").await.unwrap();
    assert_eq!(status, 400, "an operator read must group by tenant: {v}");
    for path in [
        "/v1/sessions",
        "/v1/devices",
        "/v1/sessions/session_acme_1",
        "/v1/colonies/session_acme_1/usage",
    ] {
        let (status, v) = op.get(path).await.unwrap();
        assert_eq!(status, 403, "{path}: {v}");
    }
    let (status, v) = op
        .post_batch(&body(&[turn(s, 1)], &[], "d1"))
        .await
        .unwrap();
    assert_eq!(status, 403, "{v}");
    // Tenant tokens never get the operator view, not even the admin's.
    let v = Api::new(&ingest.url(), &cloud.tenant.admin_token)
        .get_ok("/v1/usage?group_by=tenant")
        .await
        .unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 1, "{v}");

    // Stored hashed, like every token; revoked like every token.
    let pool = cloud.db.pool().await.unwrap();
    let (hashed, plain): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE token_hash = sha256(convert_to($1, 'UTF8'))),
                count(*) FILTER (WHERE position(convert_to($1, 'UTF8') IN token_hash) > 0)
         FROM operator_tokens",
    )
    .bind(&operator)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((hashed, plain), (1, 0));
    let url = cloud.db.url.clone();
    let token = operator.clone();
    blocking(move || ingest_cli(&url, &["token", "revoke", "--token", &token])).await;
    let (status, v) = op.get("/v1/usage?group_by=tenant").await.unwrap();
    assert_eq!(status, 401, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_token_cannot_add_to_change_or_adopt_another_users_session() {
    let cloud = Cloud::start().await.unwrap();
    let (url, tenant) = (cloud.db.url.clone(), cloud.tenant.id.clone());
    let mallory =
        blocking(move || isolation::token(&url, &tenant, "ingest", Some("mallory"), None)).await;
    let alice = cloud.ingest_api();
    let mallory = Api::new(&cloud.ingest.url(), &mallory);
    let s = "session_20261103_101433_51be07d2";
    let (acc, _, _) = post(
        &alice,
        &[turn(s, 100), turn(s, 100), turn(s, 100)],
        &[binding(s, 5)],
        "alice-laptop",
    )
    .await;
    assert_eq!(acc, 3);

    // Naming alice's session: usage and a status change.
    let (acc, _, reasons) = post(
        &mallory,
        &[turn(s, 1_000_000), failed(s)],
        &[],
        "alice-laptop",
    )
    .await;
    assert_eq!(
        acc, 0,
        "mallory's events went into alice's session: {reasons:?}"
    );
    assert_eq!(reasons.len(), 2);
    assert!(
        reasons.iter().all(|r| r.contains("another user")),
        "{reasons:?}"
    );
    // The same with a binding of her own for it.
    let (acc, _, reasons) = post(
        &mallory,
        &[turn(s, 2_000_000)],
        &[binding(s, 1)],
        "m-laptop",
    )
    .await;
    assert_eq!((acc, reasons.len()), (0, 1), "{reasons:?}");
    // A worker of mallory's that names alice's session as its parent and colony.
    let w = "session_mallory_worker";
    let (acc, _, reasons) = post(&mallory, &[worker_turn(w, s, 5_000)], &[], "m-laptop").await;
    assert_eq!((acc, reasons.len()), (0, 1), "{reasons:?}");
    assert!(reasons[0].contains("another user"), "{reasons:?}");

    let admin = cloud.admin_api();
    assert_eq!(
        usage_by_user_session(&admin).await,
        vec![("alice".to_string(), s.to_string(), 300)],
        "only alice's own usage is in her session"
    );
    let v = admin.session(s).await.unwrap();
    assert_ne!(
        v["status"], "failed",
        "mallory changed alice's session: {v}"
    );
    assert_eq!(v["lifecycle"], Value::Null, "{v}");
    let v = admin
        .get_ok(&format!("/v1/sessions/{s}/tree"))
        .await
        .unwrap();
    assert_eq!(
        v["colonies"],
        serde_json::json!([]),
        "mallory's worker hangs under alice's session: {v}"
    );
    let v = admin
        .get_ok(&format!("/v1/colonies/{s}/usage"))
        .await
        .unwrap();
    assert_eq!(v["totals"]["input_tokens"], 0, "{v}");
    let pool = cloud.db.pool().await.unwrap();
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE user_id <> 'alice' OR session_id <> $1",
    )
    .bind(s)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(stored, 0, "a refused event was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_sender_owns_a_session_and_a_later_user_is_refused_not_merged() {
    let cloud = Cloud::start().await.unwrap();
    let (url, tenant) = (cloud.db.url.clone(), cloud.tenant.id.clone());
    let mallory =
        blocking(move || isolation::token(&url, &tenant, "ingest", Some("mallory"), None)).await;
    let mallory = Api::new(&cloud.ingest.url(), &mallory);
    let s = "session_20261103_135512_04b64182";
    // Mallory uses the id first: the session is hers.
    assert_eq!(post(&mallory, &[turn(s, 1)], &[], "m-laptop").await.0, 1);
    // Alice's events for it are refused, not silently counted as mallory's.
    let (acc, _, reasons) = post(
        &cloud.ingest_api(),
        &[turn(s, 100), turn(s, 100)],
        &[binding(s, 1)],
        "a-laptop",
    )
    .await;
    assert_eq!(acc, 0, "alice's events were stored in mallory's session");
    assert!(
        reasons.iter().all(|r| r.contains("another user")),
        "{reasons:?}"
    );
    assert_eq!(
        usage_by_user_session(&cloud.admin_api()).await,
        vec![("mallory".to_string(), s.to_string(), 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_users_racing_for_a_new_session_id_leave_exactly_one_owner() {
    let cloud = Cloud::start().await.unwrap();
    let (url, tenant) = (cloud.db.url.clone(), cloud.tenant.id.clone());
    let mallory =
        blocking(move || isolation::token(&url, &tenant, "ingest", Some("mallory"), None)).await;
    let apis = [cloud.ingest_api(), Api::new(&cloud.ingest.url(), &mallory)];
    const ROUNDS: usize = 12;
    const N: u64 = 20;
    for round in 0..ROUNDS {
        let s = format!("session_race_{round}");
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let sends: Vec<_> = apis
            .iter()
            .cloned()
            .map(|api| {
                let events: Vec<Value> = (0..N).map(|_| turn(&s, 10)).collect();
                let body = body(&events, &[], "shared-laptop");
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    api.post_batch(&body).await.unwrap()
                })
            })
            .collect();
        let mut accepted = vec![];
        for send in sends {
            let (status, v) = send.await.unwrap();
            assert_eq!(status, 200, "{v}");
            let (a, d, r) = verdicts(&v);
            assert_eq!(a + d + r.len() as u64, N, "{v}");
            accepted.push(a);
        }
        accepted.sort_unstable();
        assert_eq!(
            accepted,
            vec![0, N],
            "round {round}: both users wrote into one session"
        );
    }
    let rows = usage_by_user_session(&cloud.admin_api()).await;
    assert_eq!(rows.len(), ROUNDS, "{rows:?}");
    assert!(rows.iter().all(|r| r.2 == 10 * N as i64), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_bindings_pass_the_id_rules_the_batch_limit_and_the_time_window() {
    let cloud = Cloud::start().await.unwrap();
    let (url, tenant) = (cloud.db.url.clone(), cloud.tenant.id.clone());
    // A tenant-wide sender (bound to no user) may name any user: only the id rules stand in its way.
    let collector = blocking(move || isolation::token(&url, &tenant, "ingest", None, None)).await;
    let ingest = Ingest::start_with(
        &cloud.db.url,
        cloud.dir.path(),
        &[("APIARY_MAX_BATCH_EVENTS", "5")],
    )
    .await
    .unwrap();
    let api = Api::new(&ingest.url(), &collector);
    let s = "session_ok_1";
    let bad: [(&str, Value, &str); 5] = [
        ("user_id", "carol@example.com".into(), "carol@example.com"),
        (
            "session_id",
            "/home/carol/projects/acquisition".into(),
            "acquisition",
        ),
        (
            "parent_session_id",
            "sk-ant-api03-abcdefghijklmnop1234".into(),
            "sk-ant-api03",
        ),
        ("device_id", "C:\\Users\\carol\\laptop".into(), "Users"),
        ("first_seen_at", "2200-01-01T00:00:00Z".into(), "2200-01-01"),
    ];
    // Every case is tried before anything is asserted, so a failure lists all that got through.
    let mut through = vec![];
    for (field, value, _) in &bad {
        let mut b = binding(s, 1);
        b[*field] = value.clone();
        let (status, v) = api
            .post_batch(&body(&[turn(s, 100)], &[b], "dev-1"))
            .await
            .unwrap();
        let named = v.to_string().contains(&format!("sessions[0].{field}"));
        if status != 422 || !named {
            through.push(format!("binding {field} = {value}: {status} {v}"));
        }
    }
    // Bindings count towards max_batch_events (5): one event and five bindings are six.
    let five: Vec<Value> = (0..5)
        .map(|i| binding(&format!("session_reg_{i}"), 1))
        .collect();
    let (status, v) = api
        .post_batch(&body(&[turn(s, 100)], &five, "dev-1"))
        .await
        .unwrap();
    if status != 413 {
        through.push(format!(
            "1 event + 5 bindings over a limit of 5: {status} {v}"
        ));
    }
    assert!(
        through.is_empty(),
        "refusals missing:\n{}",
        through.join("\n")
    );
    let text = isolation::stored_text(&cloud.db.url).await.unwrap();
    assert_eq!(text, "", "a refused batch stored something");
    for (_, _, needle) in &bad {
        assert!(!text.contains(needle));
    }
    // Within the rules the same batch goes through.
    let (status, v) = api
        .post_batch(&body(&[turn(s, 100)], &five[..4], "dev-1"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(verdicts(&v).0, 1, "{v}");
    // A session first seen long ago (before the retention window) is a long-running one: its binding
    // is kept (its time raised to the window's start), never a reason to refuse its new events.
    let old = "session_long_running";
    let mut b = binding(old, 1);
    b["first_seen_at"] = "1990-01-01T00:00:00Z".into();
    let (status, v) = api
        .post_batch(&body(&[turn(old, 100)], &[b], "dev-1"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(verdicts(&v).0, 1, "{v}");
    assert!(!isolation::stored_text(&cloud.db.url)
        .await
        .unwrap()
        .contains("1990-01-01"));
}
