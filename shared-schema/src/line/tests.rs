use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::*;
use crate::hive::Zone;
use crate::pipeline::{process_owned, Outcome, ProcessOptions};
use crate::policy::canary;
use crate::Policy;

/// The full path's answer, as a verdict: `None` for an error.
fn full(line: &str, opts: &ProcessOptions<'_>) -> Option<LineVerdict> {
    let value: Value = serde_json::from_str(line).ok()?;
    match process_owned(value, opts).ok()? {
        Outcome::Kept { event, .. } => {
            let contribution = crate::usage::contribution_of(&event).expect("in range");
            Some(LineVerdict::Kept(event, contribution))
        }
        Outcome::Filtered {
            native_type,
            reason,
        } => Some(LineVerdict::Filtered {
            native_type,
            reason,
        }),
    }
}

/// The one-pass reader agrees with the full path on `line` (or leaves it to it); true when it decided.
fn agrees(line: &str, opts: &ProcessOptions<'_>) -> Result<bool, String> {
    match process_line(line, opts) {
        None => Ok(false),
        Some(fast) => {
            let slow = full(line, opts);
            if slow.as_ref() == Some(&fast) {
                Ok(true)
            } else {
                Err(format!(
                    "line {line}\n one pass: {fast:?}\n full path: {slow:?}"
                ))
            }
        }
    }
}

/// `native` as one line with its top-level keys in the order `order` picks (a permutation index), and
/// `data`'s keys likewise, so `data` comes before and after `type`.
fn line_of(native: &Value, order: usize) -> String {
    fn object(map: &Map<String, Value>, order: usize, nested: bool) -> String {
        let mut keys: Vec<&String> = map.keys().collect();
        if !keys.is_empty() {
            let n = keys.len();
            keys.rotate_left(order % n);
            if order % 2 == 1 {
                keys.reverse();
            }
        }
        let parts: Vec<String> = keys
            .iter()
            .map(|k| {
                let v = &map[k.as_str()];
                let text = match (v, nested) {
                    (Value::Object(inner), false) if k.as_str() == "data" => {
                        object(inner, order / 3, true)
                    }
                    _ => v.to_string(),
                };
                format!("{}:{text}", Value::from(k.as_str()))
            })
            .collect();
        format!("{{{}}}", parts.join(","))
    }
    object(native.as_object().expect("an object"), order, false)
}

fn opts<'a>(policy: &'a Policy, source: Option<&'a str>) -> ProcessOptions<'a> {
    ProcessOptions {
        policy,
        zone: Zone::Utc,
        source_identity: source,
        session_hint: None,
        colony: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: canary::cases(), ..ProptestConfig::default() })]

    /// On generated events of every type (content under sensitive and random keys at any depth, markers
    /// and secrets in allowlisted fields and ids), in any key order, the one-pass reader's verdict is the
    /// full path's, with and without a source identity.
    #[test]
    fn the_one_pass_reader_answers_as_the_full_path(
        native in canary::native_event(),
        order in 0usize..64,
        source in proptest::option::of(Just("file:1:2:40")),
    ) {
        let policy = Policy::default_policy();
        let line = line_of(&native, order);
        if let Err(e) = agrees(&line, &opts(&policy, source)) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// A policy that lists a nested path, a record list and an enum, as a user's may.
const NESTED_POLICY: &str = r#"
policy_version = 1
name = "nested"
[kinds."llm.turn"]
model = "name"
"usage.input_tokens" = "count"
"usage.detail.cached" = "count"
cost_usd = "number"
[kinds."tool.call"]
tool_name = "name"
status = { enum = ["started", "completed"] }
"#;

#[test]
fn a_policy_with_nested_paths_reads_the_objects_it_lists() {
    let policy = Policy::from_toml(NESTED_POLICY).unwrap();
    let o = opts(&policy, None);
    let line = r#"{"type":"llm_turn_complete","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":4,"data":{"model":"claude","usage":{"input_tokens":7,"prompt":"secret","detail":{"cached":2,"x":1}},"usage_extra":{"input_tokens":9},"cost_usd":0.5}}"#;
    assert_eq!(agrees(line, &o), Ok(true));
    let Some(LineVerdict::Kept(event, _)) = process_line(line, &o) else {
        panic!("kept")
    };
    assert_eq!(
        Value::Object(event.data.clone()),
        json!({"model": "claude", "usage": {"input_tokens": 7, "detail": {"cached": 2}},
            "cost_usd": 0.5})
    );
    // A key that only starts like a listed one is not read.
    for (key, listed) in [
        ("usag", false),
        ("usage", true),
        ("usage_extra", false),
        ("model", true),
    ] {
        assert_eq!(policy.lists_key(EventKind::LlmTurn, key), listed, "{key}");
    }
    assert!(!policy.lists_key(EventKind::ToolCall, "model"));
}

/// Lines the value parser refuses, or reads in a way the reader does not follow, are left to the full
/// path (which refuses or reads them as before).
#[test]
fn what_the_value_parser_refuses_or_reads_otherwise_is_left_to_the_full_path() {
    let policy = Policy::default_policy();
    let o = opts(&policy, None);
    let head = r#"{"type":"tool_call_completed","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":4,"data":"#;
    let cases = [
        // A number out of an f64's range in a value nobody keeps: the value parser refuses the line.
        format!(r#"{head}{{"tool_name":"grep","result":[1e400]}}}}"#),
        // Trailing characters, a second value.
        format!(r#"{head}{{"tool_name":"grep"}}}} x"#),
        format!(r#"{head}{{"tool_name":"grep"}}}}{{}}"#),
        // A planned key twice (the value parser keeps the last).
        format!(r#"{head}{{"tool_name":"grep","tool_name":"bash"}}}}"#),
        // An envelope field twice.
        r#"{"type":"tool_call_completed","execution_id":"s1","execution_id":"s2","timestamp":"2026-11-03T10:00:00","seq":4,"data":{}}"#.to_string(),
        // serde_json's raw value marker, at the top, in data, in dropped content.
        r#"{"$serde_json::private::RawValue":"{}","type":"tool_call_completed","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":4}"#.to_string(),
        format!(r#"{head}{{"$serde_json::private::RawValue":"{{}}"}}}}"#),
        format!(r#"{head}{{"result":{{"$serde_json::private::RawValue":"1"}}}}}}"#),
        // Nesting past the value parser's limit inside dropped content.
        format!(r#"{head}{{"result":{}1{}}}}}"#, "[".repeat(200), "]".repeat(200)),
        // Ill-typed envelope fields, `data` not an object, no time, a fractional `seq`.
        r#"{"type":"tool_call_completed","execution_id":7,"timestamp":"2026-11-03T10:00:00","seq":4}"#.to_string(),
        format!(r#"{head}[1]}}"#),
        r#"{"type":"tool_call_completed","execution_id":"s1","seq":4}"#.to_string(),
        r#"{"type":"tool_call_completed","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":4.5}"#.to_string(),
        r#"{"type":"tool_call_completed","execution_id":"s1","timestamp":"not a time","seq":4}"#.to_string(),
        // No `seq` and no source identity: the id hashes the whole line.
        r#"{"type":"tool_call_completed","execution_id":"s1","timestamp":"2026-11-03T10:00:00"}"#.to_string(),
        // Not durable, canonical, not an object, invalid UTF-8 in a string's escape.
        r#"{"type":"llm_text_delta","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":4}"#.to_string(),
        r#"{"type":"tool_call_completed","schema_version":1,"event_id":null,"execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":4}"#.to_string(),
        r#"[{"type":"tool_call_completed"}]"#.to_string(),
        format!(r#"{head}{{"result":"\ud800"}}}}"#),
    ];
    for line in &cases {
        assert_eq!(process_line(line, &o), None, "the reader decided {line}");
    }
    // Invalid UTF-8 never reaches the reader: it reads text, which its callers (the intake and the
    // tailer) make with one check of the whole line and refuse with their own error.
    let good = format!(r#"{head}{{"tool_name":"grep","result":"ok","tool_use_id":"t1"}}}}"#);
    assert!(process_line(&good, &o).is_some());
}

#[test]
fn escapes_data_before_type_and_a_session_from_data_are_read_as_the_full_path_reads_them() {
    let policy = Policy::default_policy();
    let o = opts(&policy, None);
    let lines = [
        // `data` first: read raw, then with the plan.
        r#"{"data":{"tool_name":"gr\u0065p","tool_input":{"cmd":"cat ~/.ssh/id_rsa"},"tool_use_id":"t1"},"type":"tool_call_started","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":4}"#,
        // Escaped envelope strings and key.
        r#"{"type":"llm_turn_complete","execution_\u0069d":"s\u0031","stream_id":"worker:w\"1","timestamp":"2026-11-03T10:00:00.5","seq":-3,"data":{"model":"gpt-5","input_tokens":10,"output_tokens":2,"cost_usd":0}}"#,
        // The session named only in `data`, an empty execution id.
        r#"{"type":"node_stalled","execution_id":"","timestamp":"2026-11-03T10:00:00","seq":1,"data":{"session_id":"s9","reason":"long text"}}"#,
        // No session at all: filtered.
        r#"{"type":"node_stalled","timestamp":"2026-11-03T10:00:00","seq":1,"data":{"reason":"x"}}"#,
        // `data` null or missing.
        r#"{"type":"execution_started","execution_id":"s1","timestamp":"2026-11-03T10:00:00+02:00","seq":2,"data":null}"#,
        r#"{"type":"execution_started","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":2}"#,
        // A worker's event and kinds read whole.
        r#"{"type":"subagent_report","stream_id":"worker:w1","colony_id":"q1","execution_id":"w1","timestamp":"2026-11-03T10:00:00","seq":5,"data":{"success":true,"summary":"/home/alice/x","worker_id":"w1"}}"#,
        r#"{"type":"task_created","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":6,"data":{"task":{"id":12,"status":"pending","subject":"secret"}}}"#,
        // One of the canonical envelope's two markers is not a canonical event.
        r#"{"type":"tool_call_started","event_id":"e1","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":7,"data":{"tool_name":"grep"}}"#,
        r#"{"schema_version":1,"type":"tool_call_started","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":8,"data":{"tool_name":"grep"}}"#,
        // Many brackets, little nesting.
        &format!(
            r#"{{"type":"tool_call_completed","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":9,"data":{{"tool_name":"grep","result":[{}]}}}}"#,
            vec!["[1]"; 150].join(",")
        ),
    ];
    for line in lines {
        assert_eq!(agrees(line, &o), Ok(true), "{line}");
    }
}

/// Every `.jsonl` file under `dir`, recursively.
fn jsonl_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            jsonl_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "jsonl") {
            out.push(path);
        }
    }
}

/// Every line of the bench's Hive stream and of the fixture day (its event log and every session's
/// log), with and without a source identity: the same verdict, and the reader decides every durable line
/// whose id it can make (a `seq`, or a source identity).
#[test]
fn the_fixture_streams_read_the_same_in_one_pass() {
    let policy = Policy::default_policy();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("agent/benches/fixtures/hive-mixed-1000.jsonl")];
    jsonl_files(&root.join("tests/fixtures/hive/day"), &mut files);
    assert!(files.len() > 3, "{files:?}");
    let (mut durable, mut decided) = (0, 0);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for source in [None, Some("file:1:2:40")] {
            let o = opts(&policy, source);
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let v: Value = serde_json::from_str(line).unwrap();
                let is_durable = matches!(
                    v["type"].as_str().and_then(hive::classify),
                    Some(Classification::Durable(..))
                );
                let has_id = !v["seq"].is_null() || source.is_some();
                durable += usize::from(is_durable && has_id);
                match agrees(line, &o) {
                    Ok(d) => decided += usize::from(d),
                    Err(e) => panic!("{}: {e}", file.display()),
                }
            }
        }
    }
    assert!(durable > 1000, "{durable} durable lines");
    assert_eq!(
        decided, durable,
        "durable lines the reader left to the full path"
    );
}

/// The property above is not vacuous: on the generated events, the reader decides most durable ones.
#[test]
fn the_reader_decides_most_generated_durable_events() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let policy = Policy::default_policy();
    let o = opts(&policy, Some("file:1:2:40"));
    let mut runner = TestRunner::deterministic();
    let strategy = canary::native_event();
    let (mut durable, mut decided) = (0u32, 0u32);
    for i in 0..2_000 {
        let native = strategy.new_tree(&mut runner).unwrap().current();
        if !matches!(
            native["type"].as_str().and_then(hive::classify),
            Some(Classification::Durable(..))
        ) {
            continue;
        }
        durable += 1;
        decided += u32::from(agrees(&line_of(&native, i), &o).unwrap());
    }
    eprintln!("decided {decided} of {durable} durable generated events");
    assert!(
        durable > 1_000 && decided * 10 >= durable * 9,
        "decided {decided} of {durable}"
    );
}

/// Nesting at the value parser's limit, inside dropped content, with `data` before and after `type`:
/// the reader never takes a line the full path refuses. (Read raw first, `data` is parsed again on its
/// own, where the value parser's depth count would start one level lower than on the whole line: the
/// reader leaves every line deeper than the sniff's limit to the full path.)
#[test]
fn a_line_at_the_value_parsers_nesting_limit_is_read_as_the_full_path_reads_it() {
    let policy = Policy::default_policy();
    let o = opts(&policy, None);
    let envelope = r#""type":"tool_call_completed","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":4"#;
    let (mut refused, mut decided) = (0, 0);
    for depth in 90..140 {
        let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let data = format!(r#""data":{{"tool_name":"grep","result":{deep}}}"#);
        for line in [
            format!("{{{envelope},{data}}}"),
            format!("{{{data},{envelope}}}"),
        ] {
            refused += usize::from(full(&line, &o).is_none());
            match agrees(&line, &o) {
                // Up to the sniff's depth (the line's object and `data` are two more levels), the
                // reader takes the line itself.
                Ok(d) => {
                    assert!(d || depth + 2 > 100, "depth {depth} left to the full path");
                    decided += usize::from(d)
                }
                Err(e) => panic!("depth {depth}: {e}"),
            }
        }
    }
    // Both sides of the limit were reached.
    assert!(
        refused > 0 && decided > 0,
        "refused {refused}, decided {decided}"
    );
}

/// A user's policy may keep what the adapter derives and drop what it derives it from: the reader still
/// reads the inputs (tokens and cost for `cost_source`, the model for `provider`, `success` for a worker's
/// `status`).
const DERIVED_ONLY_POLICY: &str = r#"
policy_version = 1
name = "derived-only"
[kinds."llm.turn"]
provider = "name"
cost_source = { enum = ["reported", "unreported"] }
[kinds."worker.finished"]
status = "word"
"#;

#[test]
fn a_policy_that_keeps_derived_fields_but_not_their_inputs_reads_the_inputs() {
    let base = Policy::default_policy();
    let policy = Policy::load_user(DERIVED_ONLY_POLICY, &base).unwrap();
    let o = opts(&policy, None);
    let turn = r#"{"type":"llm_turn_complete","execution_id":"s1","timestamp":"2026-11-03T10:00:00","seq":4,"data":{"model":"claude-x","input_tokens":10,"output_tokens":2,"cost_usd":0}}"#;
    let worker = r#"{"type":"subagent_report","stream_id":"worker:w1","colony_id":"q1","execution_id":"w1","timestamp":"2026-11-03T10:00:00","seq":5,"data":{"success":false,"worker_id":"w1"}}"#;
    for (line, kept) in [
        (
            turn,
            json!({"provider": "anthropic", "cost_source": "unreported"}),
        ),
        (worker, json!({"status": "failed"})),
    ] {
        assert_eq!(agrees(line, &o), Ok(true), "{line}");
        let Some(LineVerdict::Kept(event, _)) = process_line(line, &o) else {
            panic!("kept: {line}")
        };
        assert_eq!(Value::Object(event.data.clone()), kept, "{line}");
    }
}
