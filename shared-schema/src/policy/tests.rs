use serde_json::{json, Value};

use super::*;
use crate::hive::Zone;
use crate::pipeline::{process_value, Outcome, ProcessOptions};

fn options(policy: &Policy) -> ProcessOptions<'_> {
    ProcessOptions {
        policy,
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
        colony: None,
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

// The tests below were added for mutants that `cargo mutants` found surviving (see docs/development.md, "Mutation testing").

#[test]
fn a_user_policy_may_not_change_a_fields_kind_or_add_enum_values() {
    let base = Policy::default_policy();
    // `input_tokens` is a count in the default: calling it a name would let strings through.
    let retyped =
        "policy_version = 1\nname = \"mine\"\n[kinds.\"llm.turn\"]\ninput_tokens = \"name\"\n";
    assert!(
        matches!(Policy::load_user(retyped, &base), Err(PolicyError::Widens(f)) if f == "llm.turn.input_tokens")
    );
    let more_values = "policy_version = 1\nname = \"mine\"\n[kinds.\"llm.turn\"]\ncost_source = { enum = [\"reported\", \"guessed\"] }\n";
    assert!(
        matches!(Policy::load_user(more_values, &base), Err(PolicyError::Widens(f)) if f == "llm.turn.cost_source")
    );
}

#[test]
fn a_policy_path_with_an_empty_segment_is_refused() {
    for path in ["usage..input_tokens", "usage.", ".usage"] {
        let text = format!(
            "policy_version = 1\nname = \"n\"\n[kinds.\"llm.turn\"]\n\"{path}\" = \"count\"\n"
        );
        assert!(
            matches!(Policy::from_toml(&text), Err(PolicyError::BadField { ref why, .. }) if why == "empty path segment"),
            "{path}"
        );
    }
}

#[test]
fn an_unknown_kind_error_lists_the_known_kinds() {
    let err = Policy::from_toml("policy_version = 1\nname = \"x\"\n[kinds.\"llm.stream\"]\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"llm.stream\""), "{err}");
    for kind in EventKind::ALL {
        assert!(err.contains(kind.as_str()), "{err} lacks {kind}");
    }
}

#[test]
fn the_policy_reports_its_name_version_and_fields() {
    let p = Policy::from_toml(
        "policy_version = 7\nname = \"seven\"\n[kinds.\"llm.turn\"]\nmodel = \"name\"\n",
    )
    .unwrap();
    assert_eq!((p.name(), p.version()), ("seven", 7));
    let fields = p.fields(EventKind::LlmTurn).expect("llm.turn is allowed");
    assert_eq!(
        fields.get("model"),
        Some(&ValueKind::Simple(SimpleKind::Name))
    );
    assert!(p.fields(EventKind::ToolCall).is_none());
}

#[test]
fn word_fields_keep_plain_words_and_drop_everything_else() {
    let word = ValueKind::Simple(SimpleKind::Word);
    for w in ["end_turn", "doom_loop", "in-progress", "v1.2"] {
        assert_eq!(conform(json!(w), &word), Ok((json!(w), false)), "{w}");
    }
    for bad in [
        json!("End Turn"),
        json!(""),
        json!("sk-ant-api03-abcdefghijklmnop1234"),
        json!("a".repeat(65)),
        json!(3),
    ] {
        assert!(conform(bad.clone(), &word).is_err(), "{bad}");
    }
}

#[test]
fn a_colony_name_passes_only_a_keyer_sharing_names_and_the_policy_widened_for_them() {
    use crate::colony::{ColonyKeyer, KeyScope};
    let base = Policy::default_policy();
    assert!(
        !base.lets_colony_names_out(),
        "names stay private by default"
    );
    let wide = base.with_colony_names();
    assert!(wide.lets_colony_names_out());
    assert_ne!(
        wide.hash(),
        base.hash(),
        "consent under it records another hash"
    );
    assert_eq!(wide.name(), "apiary-default+colony_names");
    assert_eq!(wide.with_colony_names().hash(), wide.hash(), "idempotent");
    let secret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let native = json!({"type": "colony_created", "stream_id": "queen", "node_id": null,
        "execution_id": "session_20261103_101433_51be07d2", "colony_id": null, "seq": 3, "timestamp": "2026-11-03T10:14:51.007113",
        "data": {"colony_name": "billing_refactor", "colony_path": "/home/alice/.hive/colonies/billing_refactor",
                 "queen_session_id": "session_20261103_101433_51be07d2", "is_new": true}});
    for names in [false, true] {
        let keyer = ColonyKeyer::from_hex(secret, KeyScope::Tenant)
            .unwrap()
            .sharing_names(names);
        let opts = ProcessOptions {
            colony: Some(&keyer),
            ..options(&base)
        };
        let outcome = process_value(&native, &opts).unwrap();
        let Outcome::Kept { event, .. } = outcome else {
            panic!("colony_created not kept: {outcome:?}")
        };
        assert_eq!(
            event.data_str("colony_name"),
            names.then_some("billing_refactor"),
            "sharing names: {names}"
        );
        assert!(event.data_str("colony_key").is_some());
        assert!(!event.data.contains_key("colony_path"));
        // The ingest's check: the base policy refuses a name, the widened one lets it in.
        assert_eq!(base.check(&event).is_ok(), !names);
        assert!(wide.check(&event).is_ok());
    }
    // Other kinds are redacted by the policy as it is.
    let keyer = ColonyKeyer::from_hex(secret, KeyScope::Tenant)
        .unwrap()
        .sharing_names(true);
    let opts = ProcessOptions {
        colony: Some(&keyer),
        ..options(&base)
    };
    let Outcome::Kept { event, .. } = process_value(&tool_completed(), &opts).unwrap() else {
        panic!("tool call not kept")
    };
    assert!(!event.data.contains_key("colony_name"));
}

/// Remembering clean ids changes no answer: ids found clean, found again after others pushed them out,
/// and secret-shaped ids (never remembered) between them, in any order.
#[test]
fn remembered_clean_ids_answer_as_the_scrubber() {
    let secret_ids = [
        "sk-ant-api03-abcdefghijklmnop1234",
        "alice@example.com",
        "AKIAABCDEFGHIJKLMNOP",
        "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123",
    ];
    let clean: Vec<String> = (0..20).map(|i| format!("session-{i}")).collect();
    for round in 0..3 {
        for (i, id) in clean.iter().enumerate() {
            assert!(is_id(id), "{id} (round {round})");
            let secret = secret_ids[i % secret_ids.len()];
            assert!(!is_id(secret), "{secret} (round {round})");
            assert_eq!(normalise_id(secret).map(|h| h.len()), Some(34));
            // The most recent ones again, from the front of the memory.
            assert!(is_id(&clean[i / 2]));
        }
    }
}
