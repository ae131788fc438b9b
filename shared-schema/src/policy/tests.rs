use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::hive::{Zone, HIVE_EVENT_TYPES};
use crate::pipeline::{process_value, Outcome, ProcessOptions};

fn options(policy: &Policy) -> ProcessOptions<'_> {
    ProcessOptions {
        policy,
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
    }
}

fn kept(policy: &Policy, v: &Value) -> (CanonicalEvent, RedactionReport) {
    match process_value(v, &options(policy)).unwrap() {
        Outcome::Kept { event, report } => (*event, report),
        other => panic!("expected kept, got {other:?}"),
    }
}

fn tool_completed() -> Value {
    json!({"type": "tool_call_completed", "stream_id": "queen", "node_id": "queen",
        "execution_id": "session_20261103_101433_51be07d2",
        "data": {"tool_use_id": "toolu_01XY", "tool_name": "read_file", "result": "contents of /home/alice/.ssh/id_rsa",
                 "is_error": false, "tool_index": 3, "tool_input": {"path": "/home/alice/.ssh/id_rsa"}},
        "timestamp": "2026-11-03T10:14:51.007113", "correlation_id": null, "colony_id": null, "seq": 17})
}

#[test]
fn default_policy_keeps_tool_names_and_flags_and_drops_content() {
    let policy = Policy::default_policy();
    let (event, report) = kept(&policy, &tool_completed());
    assert_eq!(
        Value::Object(event.data.clone()),
        json!({"tool_use_id": "toolu_01XY", "tool_name": "read_file", "is_error": false, "tool_index": 3, "status": "completed"})
    );
    let dropped: Vec<&str> = report.dropped.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(dropped, ["result", "tool_input"]);
    assert!(
        !serde_json::to_string(&report).unwrap().contains("id_rsa"),
        "reports hold paths, never values"
    );
    assert!(
        policy.check(&event).is_ok(),
        "a redacted event passes the ingest's check"
    );
}

#[test]
fn ill_typed_values_under_allowed_names_are_dropped() {
    let policy = Policy::default_policy();
    let mut v = tool_completed();
    v["data"]["tool_name"] = json!({"nested": "zzcanary1"});
    v["data"]["is_error"] = json!("no");
    v["data"]["tool_index"] = json!(-1);
    let (event, report) = kept(&policy, &v);
    for key in ["tool_name", "is_error", "tool_index"] {
        assert!(!event.data.contains_key(key), "{key}");
        assert!(
            report
                .dropped
                .iter()
                .any(|d| d.path == key && d.why.starts_with("expected")),
            "{key}"
        );
    }
}

#[test]
fn secret_like_ids_are_hashed_and_names_scrubbed() {
    let policy = Policy::default_policy();
    let mut v = tool_completed();
    v["data"]["tool_use_id"] = json!("/home/alice/secret plan.txt");
    v["data"]["tool_name"] = json!("search as alice@example.com");
    v["execution_id"] = json!("bob@example.com");
    let (event, report) = kept(&policy, &v);
    let id = event.data["tool_use_id"].as_str().unwrap();
    assert!(id.starts_with("h:") && id.len() == 34, "{id}");
    assert_eq!(event.data["tool_name"], "search as [email]");
    assert!(event.session_id.as_deref().unwrap().starts_with("h:"));
    assert!(report.scrubbed.contains(&"tool_name".to_string()));
    assert!(report.scrubbed.contains(&"session_id".to_string()));
}

#[test]
fn numeric_ids_travel_as_strings() {
    let policy = Policy::default_policy();
    let task = json!({"type": "task_updated", "stream_id": "queen", "execution_id": null,
        "data": {"session_id": "s1", "task_id": 12, "task": {"subject": "zzcanary"}, "status": "in_progress"},
        "timestamp": "2026-11-03T10:00:00", "seq": 5});
    let (event, _) = kept(&policy, &task);
    assert_eq!(event.data["task_id"], "12");
    assert!(policy.check(&event).is_ok());
}

#[test]
fn check_refuses_fields_outside_the_policy() {
    let policy = Policy::default_policy();
    let (mut event, _) = kept(&policy, &tool_completed());
    event.data.insert("result".into(), json!("leak"));
    event.data.insert(
        "tool_name".into(),
        json!("sk-ant-api03-abcdefghijklmnopqrstu"),
    );
    let issues = policy.check(&event).unwrap_err();
    let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
    assert!(
        paths.contains(&"result") && paths.contains(&"tool_name"),
        "{issues:?}"
    );
}

#[test]
fn the_hash_ignores_comments_and_order_but_not_content() {
    let a = Policy::from_toml("policy_version = 1\nname = \"a\"\n[kinds.\"llm.turn\"]\nmodel = \"name\"\ninput_tokens = \"count\"\n").unwrap();
    let b = Policy::from_toml("# comment\nname = \"a\"\npolicy_version = 1\n[kinds.\"llm.turn\"]\ninput_tokens = \"count\"\nmodel = \"name\"\n").unwrap();
    let c = Policy::from_toml(
        "policy_version = 1\nname = \"a\"\n[kinds.\"llm.turn\"]\nmodel = \"name\"\n",
    )
    .unwrap();
    assert_eq!(a.hash(), b.hash());
    assert_ne!(a.hash(), c.hash());
    assert_eq!(Policy::default_policy().hash().len(), 64);
}

#[test]
fn user_policies_may_narrow_but_widen_only_on_purpose() {
    let base = Policy::default_policy();
    let narrow = "policy_version = 1\nname = \"mine\"\n[kinds.\"llm.turn\"]\ninput_tokens = \"count\"\ncost_source = { enum = [\"reported\"] }\n";
    let p = Policy::load_user(narrow, &base).unwrap();
    assert!(
        p.fields(EventKind::ToolCall).is_none(),
        "kinds not listed are not allowed"
    );
    let wide = "policy_version = 1\nname = \"mine\"\n[kinds.\"tool.call\"]\nresult = \"name\"\n";
    assert!(
        matches!(Policy::load_user(wide, &base), Err(PolicyError::Widens(f)) if f == "tool.call.result")
    );
    let on_purpose = format!("allow_widening = true\n{wide}");
    assert!(Policy::load_user(&on_purpose, &base).is_ok());
    assert!(matches!(
        Policy::from_toml("policy_version = 1\nname = \"x\"\n[kinds.\"llm.stream\"]\n"),
        Err(PolicyError::UnknownKind(_))
    ));
}

#[test]
fn kinds_missing_from_the_policy_are_filtered() {
    let policy = Policy::from_toml(
        "policy_version = 1\nname = \"only-llm\"\n[kinds.\"llm.turn\"]\nmodel = \"name\"\n",
    )
    .unwrap();
    let out = process_value(&tool_completed(), &options(&policy)).unwrap();
    assert!(matches!(
        out,
        Outcome::Filtered {
            reason: crate::hive::FilterReason::KindNotAllowed,
            ..
        }
    ));
}

#[test]
fn nested_paths_keep_only_the_listed_leaf() {
    let policy = Policy::from_toml(
        "policy_version = 1\nname = \"n\"\n[kinds.\"llm.turn\"]\n\"usage.input_tokens\" = \"count\"\n",
    )
    .unwrap();
    let mut v = tool_completed();
    v["type"] = json!("llm_turn_complete");
    v["data"] = json!({"usage": {"input_tokens": 5, "prompt": "zzcanary9"}, "model": "m"});
    let (event, report) = kept(&policy, &v);
    assert_eq!(
        Value::Object(event.data),
        json!({"usage": {"input_tokens": 5}})
    );
    assert!(report.dropped.iter().any(|d| d.path == "usage.prompt"));
}

// ---- the canary property -------------------------------------------------------------------------------

const CANARY: &str = "zzcanary";

/// Keys a generated payload uses: sensitive ones, allowlisted ones, and random ones.
const KEYS: &[&str] = &[
    "tool_input",
    "result",
    "input",
    "output",
    "error",
    "task",
    "summary",
    "data",
    "conversation",
    "agent_path",
    "colony_path",
    "output_file",
    "subject",
    "description",
    "content",
    "reasoning",
    "questions",
    "headers",
    "payload",
    "context",
    "message_inventory",
    "model",
    "provider",
    "tool_name",
    "status",
    "phase",
    "signal",
    "task_id",
    "stop_reason",
    "session_id",
    "worker_id",
    "input_tokens",
    "cost_usd",
    "is_error",
    "usage",
    "id",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0u32..1000).prop_map(|n| Value::String(format!("{CANARY}{n}"))),
        (0u32..1000).prop_map(|n| Value::String(format!(
            "see /home/u/{CANARY}{n} or {CANARY}{n}@example.com"
        ))),
        (0u32..1000).prop_map(|n| Value::String(format!("{CANARY}-{n}-word"))),
        any::<u32>().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ]
}

fn payload() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(KEYS), inner, 0..6).prop_map(|m| {
                Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

fn native_event() -> impl Strategy<Value = Value> {
    let data = prop::collection::btree_map(prop::sample::select(KEYS), payload(), 0..8);
    (prop::sample::select(&HIVE_EVENT_TYPES[..]), data, any::<bool>(), 0u32..100).prop_map(|((ty, _), data, worker, seq)| {
        json!({"type": ty, "stream_id": if worker { "worker:w1" } else { "queen" }, "node_id": "queen",
            "execution_id": "s1", "data": Value::Object(data.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
            "timestamp": "2026-11-03T10:00:00.000001", "correlation_id": null,
            "colony_id": if worker { Value::from("s0") } else { Value::Null }, "seq": seq})
    })
}

/// Every (path, string) under `v` whose string holds the canary.
fn canaries(v: &Value, path: String, out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) if s.contains(CANARY) => out.push((path, s.clone())),
        Value::Array(items) => items
            .iter()
            .for_each(|i| canaries(i, format!("{path}[]"), out)),
        Value::Object(m) => {
            for (k, i) in m {
                canaries(
                    i,
                    if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    },
                    out,
                );
            }
        }
        _ => {}
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// No canary survives redaction unless it sits at a path the policy allowlists for the event's kind,
    /// whether it arrives as a native Hive event or as a canonical one.
    #[test]
    fn no_canary_survives_unless_its_path_is_allowlisted(native in native_event()) {
        let policy = Policy::default_policy();
        let opts = options(&policy);
        let outcome = process_value(&native, &opts).unwrap();
        if let Outcome::Kept { event, .. } = outcome {
            let allowed = policy.fields(event.kind).unwrap();
            let mut found = Vec::new();
            canaries(&serde_json::to_value(&event.data).unwrap(), String::new(), &mut found);
            for (path, _) in &found {
                prop_assert!(allowed.contains_key(path), "canary at {} survived in {}", path, event.kind);
            }
            let mut envelope = serde_json::to_value(&*event).unwrap();
            envelope.as_object_mut().unwrap().remove("data");
            let mut in_envelope = Vec::new();
            canaries(&envelope, String::new(), &mut in_envelope);
            prop_assert!(in_envelope.is_empty(), "canary in the envelope: {:?}", in_envelope);

            // The same event re-sent as a canonical event with the native payload put back is redacted alike.
            let mut canonical = serde_json::to_value(&*event).unwrap();
            canonical["data"] = native["data"].clone();
            if let Ok(Outcome::Kept { event: again, .. }) = process_value(&canonical, &opts) {
                let mut found = Vec::new();
                canaries(&serde_json::to_value(&again.data).unwrap(), String::new(), &mut found);
                for (path, _) in &found {
                    prop_assert!(allowed.contains_key(path), "canary at {} survived a canonical re-send", path);
                }
                prop_assert!(policy.check(&again).is_ok());
            }
        }
    }
}
