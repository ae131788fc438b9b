//! Helpers for the isolation tests (`tests/security_isolation.rs`): tokens of any binding made through
//! the ingest's command line, canonical events and batches built by hand the way a hostile client would
//! build them (any session id, any parent, any binding), and a read of what the database holds.

use serde_json::{json, Value};

use crate::events::canonical;
use crate::ingest::ingest_cli;
use crate::procs::last_line;

/// `apiary-ingest tenant create --name NAME` → the tenant id.
pub fn tenant(db_url: &str, name: &str) -> anyhow::Result<String> {
    let id = last_line(&ingest_cli(db_url, &["tenant", "create", "--name", name])?);
    anyhow::ensure!(!id.is_empty(), "tenant create printed no id");
    Ok(id)
}

/// `apiary-ingest token create --tenant T --scope S [--user U] [--device D]` → the token.
pub fn token(
    db_url: &str,
    tenant: &str,
    scope: &str,
    user: Option<&str>,
    device: Option<&str>,
) -> anyhow::Result<String> {
    let mut args = vec!["token", "create", "--tenant", tenant, "--scope", scope];
    if let Some(u) = user {
        args.extend(["--user", u]);
    }
    if let Some(d) = device {
        args.extend(["--device", d]);
    }
    let t = last_line(&ingest_cli(db_url, &args)?);
    anyhow::ensure!(!t.is_empty(), "token create printed no token");
    Ok(t)
}

/// A canonical `llm.turn` of `session` with `tokens` input tokens, one minute ago.
pub fn turn(session: &str, tokens: u64) -> Value {
    canonical(
        "llm.turn",
        "llm_turn_complete",
        Some(session),
        chrono::Utc::now() - chrono::TimeDelta::minutes(1),
        json!({ "model": "claude-sonnet-4-5-20250929", "input_tokens": tokens, "output_tokens": 1,
                "cost_usd": 0.001, "cost_source": "reported" }),
    )
}

/// A worker's `llm.turn` naming `parent` as its parent session and colony.
pub fn worker_turn(session: &str, parent: &str, tokens: u64) -> Value {
    let mut e = turn(session, tokens);
    e["agent_role"] = json!("worker");
    e["parent_session_id"] = json!(parent);
    e["colony_id"] = json!(parent);
    e
}

/// An `execution` event that marks `session` failed.
pub fn failed(session: &str) -> Value {
    canonical(
        "execution",
        "execution_failed",
        Some(session),
        chrono::Utc::now(),
        json!({ "scope": "execution", "status": "failed" }),
    )
}

/// A `health.signal` that marks `session` stalled (Hive's `node_stalled`).
pub fn stalled(session: &str) -> Value {
    canonical(
        "health.signal",
        "node_stalled",
        Some(session),
        chrono::Utc::now(),
        json!({ "signal": "stalled" }),
    )
}

/// A batch body (JSON) from `device` with these events and session bindings.
pub fn body(events: &[Value], sessions: &[Value], device: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schema_version": 1, "batch_id": uuid::Uuid::new_v4(), "sent_at": chrono::Utc::now(),
        "agent": { "device_id": device, "agent_version": "0.1.0" },
        "policy_hash": apiary_schema::Policy::default_policy().hash(),
        "sessions": sessions, "events": events,
    }))
    .expect("serializable")
}

/// A session binding first seen `minutes_ago`.
pub fn binding(session: &str, minutes_ago: i64) -> Value {
    json!({ "session_id": session,
            "first_seen_at": chrono::Utc::now() - chrono::TimeDelta::minutes(minutes_ago) })
}

/// `(accepted, duplicates, rejection reasons)` of a batch answer.
pub fn verdicts(v: &Value) -> (u64, u64, Vec<String>) {
    let reasons = v["rejected"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|x| x["reason"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    (
        v["accepted"].as_u64().unwrap_or(0),
        v["duplicates"].as_u64().unwrap_or(0),
        reasons,
    )
}

/// Every text value of the tables the read API answers from, as one string (to search for values
/// that must never have been stored).
pub async fn stored_text(db_url: &str) -> anyhow::Result<String> {
    let pool = sqlx::PgPool::connect(db_url).await?;
    let mut out = String::new();
    for table in ["sessions", "devices", "usage_rollups", "events"] {
        let rows: Vec<(String,)> = sqlx::query_as(&format!("SELECT t::text FROM {table} t"))
            .fetch_all(&pool)
            .await?;
        for (r,) in rows {
            out.push_str(&r);
            out.push('\n');
        }
    }
    pool.close().await;
    Ok(out)
}
