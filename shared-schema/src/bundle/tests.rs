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

/// A sealed version 1 bundle (before gzip) with `header` standing for the container's header.
fn sealed(key: &crate::device_key::SigningKey, header: &[u8]) -> String {
    let v: Value = serde_json::from_str(V1_MANIFEST).unwrap();
    let manifest = serde_json::to_string(&v["manifest"]).unwrap();
    let seal = Seal::sign(key, header, &manifest);
    let mut out = Vec::new();
    seal::write_sealed_manifest(&mut out, &manifest, &seal).unwrap();
    format!("{}{V1_EVENTS}", String::from_utf8(out).unwrap())
}

/// Pass 1 of an importer: the checksum and count, then the seal over (header, manifest).
fn check_sealed(text: &[u8], header: &[u8]) -> Result<crate::device_key::PublicKey, BundleError> {
    let v = verify_chunked(text, 1)?;
    v.first
        .seal
        .ok_or_else(|| BundleError::Format("unsealed".into()))?
        .check(header, &v.first.manifest_json)
}

#[test]
fn a_sealed_bundle_names_its_key_and_older_readers_still_read_it() {
    let key = crate::device_key::SigningKey::from_seed(&[5; 32]);
    let text = sealed(&key, b"HEADER");
    assert_eq!(
        check_sealed(text.as_bytes(), b"HEADER").unwrap(),
        key.public()
    );
    // A reader that knows nothing of seals reads the same manifest.
    assert_eq!(
        verify(text.as_bytes()).unwrap(),
        verify(v1().as_bytes()).unwrap()
    );
    let v = verify_chunked(text.as_bytes(), 1).unwrap();
    assert_eq!(v.chunks.len(), 2, "one digest per event line");
    // The second pass sees the same lines.
    let mut again = ChunkDigest::default();
    let raw: Vec<_> = raw_event_lines(text.as_bytes())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(raw.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 3]);
    again.add(&raw[0].1);
    assert_eq!(again.take(), v.chunks[0]);
}

#[test]
fn every_changed_byte_of_a_sealed_bundle_or_its_header_is_refused() {
    let key = crate::device_key::SigningKey::from_seed(&[6; 32]);
    let header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff";
    let text = sealed(&key, header).into_bytes();
    check_sealed(&text, header).unwrap();
    for i in 0..text.len() {
        let mut changed = text.clone();
        changed[i] ^= 0x01;
        assert!(
            check_sealed(&changed, header).is_err(),
            "byte {i} flipped was accepted"
        );
    }
    for i in 0..header.len() {
        let mut h = *header;
        h[i] ^= 0x01;
        let e = check_sealed(&text, &h).unwrap_err();
        assert!(matches!(e, BundleError::Seal(_)), "header byte {i}: {e}");
    }
}

#[test]
fn a_seal_by_another_key_or_scheme_is_refused_with_the_reason() {
    let key = crate::device_key::SigningKey::from_seed(&[7; 32]);
    let other = crate::device_key::SigningKey::from_seed(&[8; 32]);
    let text = sealed(&key, b"H");
    // The seal names another key than the one that signed.
    let swapped = text.replace(&key.public().to_text(), &other.public().to_text());
    let e = check_sealed(swapped.as_bytes(), b"H")
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not verify with key SHA256:"), "{e}");
    let scheme = text.replace(seal::SCHEME, "apiary-bundle-seal-v9");
    let e = check_sealed(scheme.as_bytes(), b"H")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown seal scheme"), "{e}");
    let extra = text.replacen("{\"manifest\"", "{\"x\":1,\"manifest\"", 1);
    let e = check_sealed(extra.as_bytes(), b"H")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `x`"), "{e}");
}
