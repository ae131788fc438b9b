//! The canary property: whatever a producer sends, nothing but allowlisted, typed, scrubbed values leaves
//! the device — checked by a checker of its own, not by the redaction code it checks.
//!
//! Generated native Hive events carry markers (`zzcanary<N>`, each N used once per case) everywhere:
//! in content under sensitive and random keys at any depth, in the values of the fields the policy
//! allowlists for the event's kind, and in the envelope ids (`execution_id`, `colony_id`,
//! `correlation_id`, `node_id`, the worker id in `stream_id`, a session id taken from `data`). Many are
//! wrapped in the secrets the scrubber must catch: absolute and home paths (Unix and Windows), e-mail
//! addresses, API keys, JWTs, bearer tokens, `key=value` secrets; some are multi-line or too long.
//!
//! For every kept event, the checker (this file's own code: the allowlist is read from the shipped TOML
//! with `toml`, value kinds and secret shapes are checked with its own rules) requires that
//! - every `data` field is allowlisted for the event's kind and its value has the listed kind;
//! - every envelope id is an id (`[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,199}` or a hash `h:<32 hex>`);
//! - no string anywhere holds a path, an e-mail, a key or a credential;
//! - a marker that survives came from the same field, from an id (ids may be lifted into the envelope
//!   or into an `*_id` field), or from the same key one level down (`task.status` → `status`): content
//!   never moves into another field;
//! - the same event re-sent as a canonical event with the native payload put back is kept (an error
//!   fails the case) and passes the same checks, with the same envelope.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use proptest::prelude::*;
use regex::Regex;
use serde_json::{json, Map, Value};

use super::DEFAULT_POLICY_TOML;
use crate::hive::{Classification, Zone, HIVE_EVENT_TYPES};
use crate::pipeline::{process_owned, process_value, Outcome, ProcessOptions};
use crate::Policy;

const CANARY: &str = "zzcanary";

/// The shipped allowlist as this test reads it: kind → field path → value kind (a TOML value).
pub(super) fn allowlist() -> &'static BTreeMap<String, BTreeMap<String, toml::Value>> {
    static LIST: OnceLock<BTreeMap<String, BTreeMap<String, toml::Value>>> = OnceLock::new();
    LIST.get_or_init(|| {
        #[derive(serde::Deserialize)]
        struct File {
            kinds: BTreeMap<String, BTreeMap<String, toml::Value>>,
        }
        toml::from_str::<File>(DEFAULT_POLICY_TOML)
            .expect("the shipped policy parses as TOML")
            .kinds
    })
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("test regex")
}

/// Whether `v` has the value kind `spec` (`"count"`, `"id"`, `{ enum = [..] }`, ...).
pub(super) fn fits(spec: &toml::Value, v: &Value) -> bool {
    static ID: OnceLock<(Regex, Regex, Regex)> = OnceLock::new();
    let (id, hashed, word) = ID.get_or_init(|| {
        (
            re(r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,199}$"),
            re(r"^h:[0-9a-f]{32}$"),
            re(r"^[a-z0-9_.-]{1,64}$"),
        )
    });
    let s = v.as_str();
    match spec {
        toml::Value::String(k) => match k.as_str() {
            "count" => v.is_u64(),
            "number" => v.as_f64().is_some_and(f64::is_finite),
            "bool" => v.is_boolean(),
            "id" => s.is_some_and(|s| id.is_match(s) || hashed.is_match(s)),
            "name" => s.is_some_and(|s| {
                (1..=128).contains(&s.chars().count()) && !s.chars().any(char::is_control)
            }),
            "word" => s.is_some_and(|s| word.is_match(s)),
            "timestamp" => v.as_u64().is_some_and(|ms| ms <= 253_402_300_799_999),
            other => panic!("unknown value kind {other} in the policy"),
        },
        toml::Value::Table(t) => {
            let values = t["enum"].as_array().expect("enum values");
            s.is_some_and(|s| values.iter().any(|e| e.as_str() == Some(s)))
        }
        other => panic!("unknown value kind {other:?} in the policy"),
    }
}

/// The secret the string still holds, if any (the shapes the generator plants, found by this test's
/// own patterns).
pub(super) fn leak(s: &str) -> Option<&'static str> {
    static RULES: OnceLock<Vec<(&'static str, Regex)>> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
        [
            ("a Unix path", r"/home/|/etc/|(^|\s)/\w+/"),
            ("a home path", r"~/"),
            ("a Windows path", r"(?i)[a-z]:\\"),
            ("an e-mail address", r"@example\.(com|org)"),
            (
                "an API key",
                r"sk-ant-|sk-proj-|gh[pousr]_|github_pat_|xox[abeprs]-|xapp-|AIza|(AKIA|ASIA)[0-9A-Z]{8}|[rs]k_(live|test)_",
            ),
            ("an AWS secret key", r"wJalrXUtnFEMI"),
            ("a PEM block", r"-----BEGIN "),
            ("credentials in a URL", r"://[^/\s:@]+:[^/\s@]*@"),
            ("a JWT", r"eyJ"),
            ("a bearer token", r"(?i)bearer\s"),
            ("a key=value secret", r"(?i)(api_key|password|token)\s*[=:]"),
        ]
        .into_iter()
        .map(|(what, p)| (what, re(p)))
        .collect()
    });
    rules.iter().find(|(_, r)| r.is_match(s)).map(|(w, _)| *w)
}

/// Every marker (`zzcanary<N>`) in a string.
pub(super) fn markers(s: &str) -> Vec<String> {
    static M: OnceLock<Regex> = OnceLock::new();
    M.get_or_init(|| re(r"zzcanary\d+"))
        .find_iter(s)
        .map(|m| m.as_str().to_string())
        .collect()
}

/// (dotted path, value) of every scalar under `v`; arrays add `[]`.
fn leaves(v: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Array(items) => items
            .iter()
            .for_each(|i| leaves(i, &format!("{path}[]"), out)),
        Value::Object(m) => m.iter().for_each(|(k, i)| {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            leaves(i, &p, out)
        }),
        other => out.push((path.to_string(), other.clone())),
    }
}

/// Envelope fields that hold ids in a canonical event.
pub(super) const ENVELOPE_IDS: [&str; 7] = [
    "session_id",
    "parent_session_id",
    "colony_id",
    "worker_id",
    "node_id",
    "execution_id",
    "trace_id",
];

/// Where each marker was planted in the input: `data.<path>` or an envelope field name.
fn planted(input: &Value) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut all = vec![];
    leaves(&input["data"], "data", &mut all);
    for f in [
        "execution_id",
        "colony_id",
        "correlation_id",
        "node_id",
        "stream_id",
    ]
    .into_iter()
    .chain(ENVELOPE_IDS)
    {
        all.push((f.to_string(), input[f].clone()));
    }
    for (path, v) in all {
        for m in v.as_str().map(markers).unwrap_or_default() {
            out.entry(m).or_default().push(path.clone());
        }
    }
    out
}

/// Whether a marker found at `found` (`data.<path>` or an envelope field) may have come from `source`.
fn may_come_from(found: &str, source: &str) -> bool {
    let last = source.rsplit('.').next().unwrap_or(source);
    let is_id = !source.starts_with("data.") || last == "id" || last.ends_with("_id");
    let found_key = found.rsplit('.').next().unwrap_or(found);
    found == source || is_id || (found.starts_with("data.") && last == found_key)
}

/// Checks one kept event against the allowlist, the value kinds, the secret shapes and the markers'
/// origins; `Err` says what is wrong.
fn check(event: &Value, input: &Value) -> Result<(), String> {
    let kind = event["type"].as_str().ok_or("no type")?;
    let allowed = allowlist().get(kind).ok_or(format!(
        "kept an event of kind {kind}, which the policy does not list"
    ))?;
    let mut found = vec![];
    let Some(data) = event["data"].as_object() else {
        return Err("data is not an object".into());
    };
    for (key, v) in data {
        let spec = allowed
            .get(key)
            .ok_or(format!("{kind}: data.{key} is not allowlisted"))?;
        if !fits(spec, v) {
            return Err(format!("{kind}: data.{key} = {v} is not a {spec}"));
        }
        found.push((format!("data.{key}"), v.clone()));
    }
    for f in ENVELOPE_IDS {
        match &event[f] {
            Value::Null => {}
            v if fits(&toml::Value::String("id".into()), v) => {
                found.push((f.to_string(), v.clone()))
            }
            v => return Err(format!("envelope {f} = {v} is not an id")),
        }
    }
    let origins = planted(input);
    for (at, v) in &found {
        let Some(s) = v.as_str() else { continue };
        if let Some(what) = leak(s) {
            return Err(format!("{at} = {s:?} holds {what}"));
        }
        for m in markers(s) {
            let from = origins.get(&m).cloned().unwrap_or_default();
            if !from.iter().any(|src| may_come_from(at, src)) {
                return Err(format!("{m} moved from {from:?} to {at}"));
            }
        }
    }
    let mut rest = event.clone();
    for f in ENVELOPE_IDS.into_iter().chain(["data"]) {
        rest.as_object_mut().expect("an object").remove(f);
    }
    if rest.to_string().contains(CANARY) {
        return Err(format!("a marker outside data and the ids: {rest}"));
    }
    Ok(())
}

/// A string that carries marker `n`: plain, or wrapped in something the scrubber must catch.
pub(super) fn marked(n: u32) -> impl Strategy<Value = String> {
    let c = format!("{CANARY}{n}");
    prop::sample::select(vec![
        c.clone(),
        format!("{c}-word"),
        format!("see /home/alice/{c}/notes.md now"),
        format!("/etc/{c}"),
        format!("~/{c}/todo.md"),
        format!(r"C:\Users\{c}\doc.txt"),
        format!("{c}@example.com"),
        format!("mail {c}@example.org please"),
        format!("sk-ant-api03-{c}abcdefghijklmnop"),
        format!("ghp_{c}ABCDEFGHIJKLMNOPQRSTU"),
        format!("gho_{c}ABCDEFGHIJKLMNOPQRSTU"),
        format!("ghs_{c}ABCDEFGHIJKLMNOPQRSTU"),
        format!("github_pat_11{c}_ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
        format!("xoxb-{c}-1234567890-abcdefgh"),
        format!("xoxp-{c}-1234567890-abcdefgh"),
        format!("AIzaSy{c}ABCDEFGHIJKLMNOPQRSTUVWXYZ0123"),
        format!("{c} AKIAABCDEFGHIJKLMNOP"),
        format!("id ASIA{} for {c}", "ABCDEFGHIJKLMNOP"),
        format!("{c} wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        format!("sk_live_{c}abcdefghijklmnop"),
        format!("-----BEGIN PRIVATE KEY-----\nMIIE{c}\n-----END PRIVATE KEY-----"),
        format!("clone https://{c}:hunter2@git.example.net/repo"),
        format!("eyJ{c}abcdef.eyJhbGciOiJIUzI1.abcdefghijkl"),
        format!("Bearer {c}.abc"),
        format!("api_key={c}"),
        format!("{c}\nsecond line"),
        format!("{c} {}", "x".repeat(140)),
    ])
}

/// A scalar: marked text most of the time, else numbers, booleans, null.
pub(super) fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (0u32..1_000_000).prop_flat_map(marked).prop_map(Value::String),
        1 => any::<u32>().prop_map(Value::from),
        1 => (-1000i64..1000).prop_map(Value::from),
        1 => (0.0f64..1e6).prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::from),
        1 => Just(Value::Null),
    ]
}

/// Keys for content: Hive's sensitive ones, allowlisted names (under the wrong parent), random ones.
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
    "tool_name",
    "status",
    "session_id",
    "worker_id",
    "id",
    "usage",
    "prompt",
    "message",
];

fn payload() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(KEYS), inner, 0..4).prop_map(|m| {
                Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

/// An envelope id: a clean one, or a marked string (often not an id at all).
fn envelope_id(clean: &'static str) -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::from(clean)),
        Just(Value::Null),
        (0u32..1_000_000)
            .prop_flat_map(marked)
            .prop_map(Value::String),
    ]
}

/// A native Hive event of any type, with markers in content, in allowlisted fields and in the ids.
pub(crate) fn native_event() -> impl Strategy<Value = Value> {
    prop::sample::select(&HIVE_EVENT_TYPES[..]).prop_flat_map(|(ty, class)| {
        let fields: Vec<String> = match class {
            Classification::Durable(kind, _) => allowlist()
                .get(kind.as_str())
                .map(|f| f.keys().cloned().collect())
                .unwrap_or_default(),
            Classification::Filtered(_) => vec![],
        };
        let allowed = if fields.is_empty() {
            Just(BTreeMap::new()).boxed()
        } else {
            prop::collection::btree_map(prop::sample::select(fields), leaf(), 1..6).boxed()
        };
        let content = prop::collection::btree_map(prop::sample::select(KEYS), payload(), 0..5);
        let ids = (
            envelope_id("s1"),
            envelope_id("s0"),
            envelope_id("c1"),
            envelope_id("queen"),
            prop_oneof![
                Just("queen".to_string()),
                Just("worker:w1".to_string()),
                (0u32..1_000_000)
                    .prop_flat_map(marked)
                    .prop_map(|m| format!("worker:{m}"))
            ],
        );
        (Just(ty), allowed, content, ids, 0u32..100).prop_map(
            |(ty, allowed, content, (exec, colony, corr, node, stream), seq)| {
                let mut data: Map<String, Value> = content
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect();
                data.extend(allowed);
                json!({"type": ty, "stream_id": stream, "node_id": node, "execution_id": exec,
                    "data": data, "timestamp": "2026-11-03T10:00:00.000001",
                    "correlation_id": corr, "colony_id": colony, "seq": seq})
            },
        )
    })
}

pub(crate) fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// The intake's path ([`process_owned`], which moves `data` instead of copying it) answers exactly as
    /// [`process_value`] on every generated event, with and without a source identity.
    #[test]
    fn the_owned_path_answers_as_process_value(native in native_event(), source in proptest::option::of(Just("file:1:2:40"))) {
        let policy = Policy::default_policy();
        let opts = ProcessOptions { policy: &policy, zone: Zone::Utc, source_identity: source, session_hint: None, colony: None };
        prop_assert_eq!(process_owned(native.clone(), &opts), process_value(&native, &opts));
    }

    /// Whatever survives redaction is allowlisted, of its kind, scrubbed, and where it came from —
    /// whether the event arrives native or as a canonical event with the raw payload put back.
    #[test]
    fn nothing_but_allowlisted_scrubbed_values_survives(native in native_event()) {
        let policy = Policy::default_policy();
        let opts = ProcessOptions { policy: &policy, zone: Zone::Utc, source_identity: None, session_hint: None, colony: None };
        let Ok(Outcome::Kept { event, .. }) = process_value(&native, &opts) else {
            return Ok(());
        };
        let kept = serde_json::to_value(&*event).unwrap();
        if let Err(e) = check(&kept, &native) {
            prop_assert!(false, "{}\nkept: {}", e, kept);
        }
        // The same event re-sent as a canonical one with the native payload put back.
        let mut canonical = kept.clone();
        canonical["data"] = native["data"].clone();
        let again = match process_value(&canonical, &opts) {
            Ok(Outcome::Kept { event, .. }) => serde_json::to_value(&*event).unwrap(),
            other => {
                prop_assert!(false, "the canonical re-send was not kept: {:?}", other);
                unreachable!()
            }
        };
        if let Err(e) = check(&again, &canonical) {
            prop_assert!(false, "canonical re-send: {}\nkept: {}", e, again);
        }
        for f in ENVELOPE_IDS {
            prop_assert_eq!(&again[f], &kept[f], "{} changed on the canonical re-send", f);
        }
    }
}

#[test]
fn the_checker_catches_what_it_is_meant_to() {
    let native = json!({"type": "tool_call_completed", "execution_id": "s1", "colony_id": null,
        "data": {"result": "zzcanary7 in /home/a/x", "tool_name": "zzcanary8"}});
    let event = |data: Value, session: &str| json!({"type": "tool.call", "session_id": session, "native_type": "tool_call_completed", "data": data});
    assert_eq!(
        check(&event(json!({"tool_name": "zzcanary8"}), "s1"), &native),
        Ok(())
    );
    let bad = [
        (event(json!({"result": "x"}), "s1"), "not allowlisted"),
        (event(json!({"tool_name": "zzcanary7"}), "s1"), "moved from"),
        (
            event(json!({"tool_name": "see /home/a/x"}), "s1"),
            "a Unix path",
        ),
        (event(json!({"tool_name": "a\nb"}), "s1"), "is not a"),
        (event(json!({"is_error": "no"}), "s1"), "is not a"),
        (event(json!({}), "/home/a"), "is not an id"),
        (event(json!({}), "a@example.com"), "an e-mail"),
    ];
    for (e, want) in bad {
        let got = check(&e, &native).unwrap_err();
        assert!(got.contains(want), "{got} should say {want}");
    }
}

#[test]
fn the_generated_events_put_markers_where_they_can_survive() {
    use proptest::strategy::ValueTree;
    let policy = Policy::default_policy();
    let opts = ProcessOptions {
        policy: &policy,
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
        colony: None,
    };
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut kept, mut in_data, mut in_envelope, mut scrubbed, mut hashed) = (0, 0, 0, 0, 0);
    for _ in 0..2000 {
        let native = native_event().new_tree(&mut runner).unwrap().current();
        let Ok(Outcome::Kept { event, .. }) = process_value(&native, &opts) else {
            continue;
        };
        kept += 1;
        let v = serde_json::to_value(&*event).unwrap();
        let data = v["data"].to_string();
        in_data += usize::from(data.contains(CANARY));
        scrubbed += usize::from(data.contains("[path]") || data.contains("[email]"));
        let ids: String = ENVELOPE_IDS.iter().map(|f| v[f].to_string()).collect();
        in_envelope += usize::from(ids.contains(CANARY));
        hashed += usize::from(ids.contains("\"h:"));
    }
    // Without these the property above would hold vacuously.
    for (what, n, least) in [
        ("kept events", kept, 200),
        ("markers surviving in allowlisted data", in_data, 10),
        ("markers surviving in envelope ids", in_envelope, 20),
        ("scrubbed values", scrubbed, 5),
        ("hashed ids", hashed, 20),
    ] {
        assert!(n >= least, "only {n} {what} in 2000 generated events");
    }
}
