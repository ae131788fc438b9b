use super::*;

/// A bundle exactly as the version 1 agent writes it (before gzip): the manifest line, then the event
/// lines the checksum covers.
const V1_EVENTS: &str = concat!(
    r#"{"schema_version":1,"event_id":"6f1e3a52-8d0c-5b7e-9a41-2c3d4e5f6a7b","type":"llm.turn","occurred_at":"2026-11-03T10:15:09.412338Z","runtime":"hive","session_id":"session_a","agent_role":"queen","native_type":"llm_turn_complete","data":{"cost_source":"reported","cost_usd":0.02958,"input_tokens":18250,"model":"claude-sonnet-4-5-20250929","output_tokens":412}}"#,
    "\n",
    r#"{"schema_version":1,"event_id":"0b2c4d6e-8f10-5a12-b345-6789abcdef01","type":"tool.call","occurred_at":"2026-11-03T10:15:10Z","runtime":"hive","session_id":"session_a","agent_role":"queen","native_type":"tool_call_completed","data":{"is_error":false,"status":"completed","tool_name":"read_file"}}"#,
    "\n",
);
const V1_MANIFEST: &str = r#"{"manifest":{"format":"apiary-export","format_version":1,"schema_version":1,"created_at":"2026-11-03T12:00:00Z","agent_version":"0.1.0","device_id":"laptop-1","policy_hash":"abc","policy_hashes":["abc"],"sessions":[{"session_id":"session_a","user_id":"alice","device_id":"laptop-1","first_seen_at":"2026-11-03T10:00:00Z"}],"counts":{"events":2,"by_type":{"llm.turn":1,"tool.call":1},"held":2},"checksum":{"algorithm":"sha256","over":"event_lines","value":"777ad93ed6907f0938c9d51fd1fd5d743c9795280078368eaea5a4794d6d0d71"}}}"#;

fn v1() -> String {
    format!("{V1_MANIFEST}\n{V1_EVENTS}")
}

#[test]
fn a_version_1_bundle_verifies_and_yields_its_events() {
    let head = verify(v1().as_bytes()).unwrap();
    assert_eq!(head.device_id.as_deref(), Some("laptop-1"));
    assert_eq!(head.event_count, Some(2));
    assert_eq!(head.sessions[0].user_id.as_deref(), Some("alice"));
    let events: Vec<_> = event_lines(v1().as_bytes())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].0, 3, "line numbers count the manifest");
    assert_eq!(events[1].1["type"], "tool.call");
}

#[test]
fn the_writer_writes_what_version_1_wrote() {
    let v: Value = serde_json::from_str(V1_MANIFEST).unwrap();
    let manifest: Manifest = serde_json::from_value(v["manifest"].clone()).unwrap();
    let mut hash = EventLinesHash::default();
    V1_EVENTS.lines().for_each(|l| hash.add_line(l));
    assert_eq!(hash.finish(), manifest.checksum);
    let mut out = Vec::new();
    write_manifest(&mut out, &manifest).unwrap();
    let head_len = out.len();
    for l in V1_EVENTS.lines() {
        write_event_line(&mut out, l).unwrap();
    }
    let text = String::from_utf8(out).unwrap();
    let written: Value = serde_json::from_str(&text[..head_len]).unwrap();
    assert_eq!(written, v, "the same manifest");
    assert_eq!(&text[head_len..], V1_EVENTS, "the same event bytes");
}

#[test]
fn a_tampered_or_short_bundle_is_refused_before_anything_is_read() {
    let tampered = v1().replace("read_file", "rm_file");
    assert!(matches!(
        verify(tampered.as_bytes()),
        Err(BundleError::Checksum { .. })
    ));
    let short = v1().replace(r#""events":2"#, r#""events":3"#);
    assert!(matches!(
        verify(short.as_bytes()),
        Err(BundleError::Count {
            expected: 3,
            actual: 2
        })
    ));
    let err = verify("{\"not\": 1}\n".as_bytes()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "not an export bundle: line 1 is not {\"manifest\": ...}"
    );
}

#[test]
fn older_spellings_and_a_missing_last_newline_are_read() {
    let hex = "777ad93ed6907f0938c9d51fd1fd5d743c9795280078368eaea5a4794d6d0d71";
    let head = format!(
        r#"{{"manifest":{{"device":{{"device_id":"d9"}},"event_count":2,"sha256":"sha256:{}"}}}}"#,
        hex.to_uppercase()
    );
    let text = format!("{head}\n{}", V1_EVENTS.trim_end());
    let m = verify(text.as_bytes()).unwrap();
    assert_eq!(m.device_id.as_deref(), Some("d9"));
    assert_eq!(m.agent_version, "unknown");
}
