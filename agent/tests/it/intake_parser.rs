//! Property tests of the HTTP intake parser (`http::parse` over `http::split`): for one event, a JSON
//! array and NDJSON, Hive-native and canonical, with hostile pieces mixed in —
//! - arbitrary bytes never panic, and nothing exceeds the bounds (events per body, listed errors and
//!   dead-letter items per request, items per filter reason);
//! - every good event is kept, every filtered one counted, and every bad one gets its own error at its
//!   own line or index (the first 100; the rest are counted);
//! - the array scanner finds exactly the elements serde finds, for arbitrary JSON.
//!
//! Cases: proptest's default (256 per property); `PROPTEST_CASES=N` runs more.

use apiary_agent::http::parse::{parse_body, Limits, Parsed, MAX_DEAD_LETTERS};
use apiary_agent::http::split::{split, Split, TooManyEvents};
use apiary_agent::outbox::Item;
use apiary_schema::hive::Zone;
use apiary_schema::{process_value, Outcome, Policy, ProcessOptions};
use proptest::prelude::*;
use serde_json::{json, Value};

const MAX_LINE: usize = 2048;

fn parse(body: &[u8], max_events: usize) -> Result<Parsed, TooManyEvents> {
    let policy = Policy::default_policy();
    let opts = ProcessOptions {
        policy: &policy,
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
        colony: None,
    };
    let limits = Limits {
        max_line: MAX_LINE,
        max_events,
    };
    parse_body(body, &opts, limits)
}

/// What one piece of a generated body is, and so what the parser must make of it.
#[derive(Debug, Clone)]
enum Piece {
    /// A durable event (Hive-native or canonical): kept.
    Good(String),
    /// A streaming delta: counted as filtered.
    Filtered(String),
    /// Valid JSON that is not an event (a number, an array, nesting past 128 levels, an event over the
    /// line limit): one error.
    BadJson(String),
    /// Not JSON at all (garbage, invalid UTF-8): one error; only on a line of its own.
    BadBytes(Vec<u8>),
}

impl Piece {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Piece::Good(s) | Piece::Filtered(s) | Piece::BadJson(s) => s.clone().into_bytes(),
            Piece::BadBytes(b) => b.clone(),
        }
    }
    fn is_bad(&self) -> bool {
        matches!(self, Piece::BadJson(_) | Piece::BadBytes(_))
    }
}

fn hive_turn(session: u8, seq: u32, tokens: u32) -> Value {
    let data = json!({"model": "claude-sonnet-4-5-20250929", "input_tokens": tokens, "output_tokens": 7,
                      "cached_tokens": 0, "cache_creation_tokens": 0, "cost_usd": 0.001});
    let session = format!("session_{session}");
    tests::events::hive(
        "llm_turn_complete",
        &session,
        tests::events::hive_day(),
        seq.into(),
        data,
    )
}

fn good() -> impl Strategy<Value = Piece> {
    (0u8..4, any::<u32>(), 0u32..1_000_000, any::<bool>(), any::<bool>()).prop_map(
        |(session, seq, tokens, canonical, tool)| {
            let mut native = hive_turn(session, seq, tokens);
            if tool {
                native["type"] = json!("tool_call_completed");
                native["data"] = json!({"tool_use_id": format!("toolu_{seq}"), "tool_name": "read_file",
                    "result": "secret file contents", "is_error": false});
            }
            if !canonical {
                return Piece::Good(native.to_string());
            }
            let policy = Policy::default_policy();
            let Ok(Outcome::Kept { event, .. }) = process_value(&native, &ProcessOptions::new(&policy))
            else {
                panic!("the generated native event is kept: {native}")
            };
            Piece::Good(serde_json::to_string(&event).unwrap())
        },
    )
}

fn filtered() -> impl Strategy<Value = Piece> {
    (0u8..4, any::<u32>()).prop_map(|(session, seq)| {
        Piece::Filtered(
            json!({"type": "llm_text_delta", "stream_id": "queen", "execution_id": format!("session_{session}"),
                "data": {"content": "hello", "snapshot": "hello"}, "timestamp": "2026-11-03T10:15:09.412338",
                "seq": seq})
            .to_string(),
        )
    })
}

fn bad_json() -> impl Strategy<Value = Piece> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        "[a-z \\\\\"]{0,20}".prop_map(|s| Value::String(s).to_string()),
        Just("null".to_string()),
        Just("[1, {\"type\": \"llm_turn_complete\"}]".to_string()),
        (130usize..400).prop_map(|d| format!("{}1{}", "[".repeat(d), "]".repeat(d))),
        Just(
            hive_turn(0, 1, 1)
                .to_string()
                .replace("claude", &"c".repeat(MAX_LINE))
        ),
    ]
    .prop_map(Piece::BadJson)
}

fn bad_bytes() -> impl Strategy<Value = Piece> {
    prop_oneof![
        // Starts with a byte no JSON value starts with, so it can never join the next line.
        proptest::collection::vec(
            any::<u8>().prop_filter("no newline", |b| *b != b'\n'),
            0..60
        )
        .prop_map(|mut b| {
            b.insert(0, b'#');
            b
        }),
        Just(b"{\"type\": \"\xff\xfe\"}".to_vec()),
    ]
    .prop_map(Piece::BadBytes)
}

fn any_piece() -> impl Strategy<Value = Piece> {
    prop_oneof![4 => good(), 2 => filtered(), 2 => bad_json(), 2 => bad_bytes()]
}

fn json_piece() -> impl Strategy<Value = Piece> {
    prop_oneof![4 => good(), 2 => filtered(), 2 => bad_json()]
}

fn kept(p: &Parsed) -> usize {
    p.items
        .iter()
        .filter(|i| matches!(i, Item::Kept(_)))
        .count()
}

fn filtered_count(p: &Parsed) -> u64 {
    p.items
        .iter()
        .filter(|i| matches!(i, Item::Filtered { .. }))
        .map(Item::received)
        .sum()
}

/// The bounds every parse keeps, whatever the input.
fn assert_bounded(p: &Parsed, max_events: usize) {
    assert!(p.events() as usize <= max_events, "{} events", p.events());
    assert!(p.errors.len() <= MAX_DEAD_LETTERS);
    let dead = p
        .items
        .iter()
        .filter(|i| matches!(i, Item::Malformed { .. } | Item::MalformedMany { .. }))
        .count();
    assert!(dead <= MAX_DEAD_LETTERS + 1, "{dead} dead-letter items");
    let filters = p
        .items
        .iter()
        .filter(|i| matches!(i, Item::Filtered { .. }))
        .count();
    assert!(filters <= 16, "{filters} filtered items");
    assert_eq!(p.rejected(), p.errors.len() as u64 + p.unlisted);
}

/// What the parse must say about `pieces` at `positions` (line numbers or array indexes).
fn assert_outcome(p: &Parsed, pieces: &[Piece], positions: &[u64], by_index: bool) {
    let goods = pieces
        .iter()
        .filter(|x| matches!(x, Piece::Good(_)))
        .count();
    let filters = pieces
        .iter()
        .filter(|x| matches!(x, Piece::Filtered(_)))
        .count() as u64;
    let bad: Vec<u64> = pieces
        .iter()
        .zip(positions)
        .filter(|(x, _)| x.is_bad())
        .map(|(_, at)| *at)
        .collect();
    assert_eq!(kept(p), goods, "every good event is kept");
    assert_eq!(
        filtered_count(p),
        filters,
        "every filtered event is counted"
    );
    assert_eq!(p.rejected(), bad.len() as u64, "{:?}", p.errors);
    let listed: Vec<u64> = p
        .errors
        .iter()
        .map(|e| if by_index { e.index } else { e.line }.expect("a position"))
        .collect();
    assert_eq!(
        listed,
        bad[..bad.len().min(MAX_DEAD_LETTERS)],
        "errors at their own places"
    );
    assert_eq!(p.events(), pieces.len() as u64);
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_and_stay_bounded(
        body in proptest::collection::vec(any::<u8>(), 0..4096),
        max_events in 1usize..64,
    ) {
        if let Ok(p) = parse(&body, max_events) {
            assert_bounded(&p, max_events);
        }
    }

    #[test]
    fn a_valid_body_with_bytes_flipped_never_panics_and_stays_bounded(
        pieces in proptest::collection::vec(any_piece(), 1..40),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        max_events in 1usize..64,
    ) {
        let mut body = pieces.iter().flat_map(|p| { let mut b = p.bytes(); b.push(b'\n'); b }).collect::<Vec<u8>>();
        for (at, byte) in flips {
            let i = at.index(body.len());
            body[i] = byte;
        }
        if let Ok(p) = parse(&body, max_events) {
            assert_bounded(&p, max_events);
        }
    }

    #[test]
    fn ndjson_keeps_every_good_line_and_names_every_bad_one(
        pieces in proptest::collection::vec(any_piece(), 1..150),
        separators in proptest::collection::vec(prop_oneof!["\n", "\r\n", "\n\n", "\n  "], 150),
    ) {
        // A body that is one JSON array is an array, not NDJSON (a first line that is an array is not).
        prop_assume!(pieces.len() > 1 || !pieces[0].bytes().starts_with(b"["));
        let mut body = Vec::new();
        let mut lines = Vec::new();
        let mut line = 1u64;
        for (piece, sep) in pieces.iter().zip(&separators) {
            lines.push(line);
            body.extend(piece.bytes());
            body.extend(sep.as_bytes());
            line += sep.matches('\n').count() as u64;
        }
        let p = parse(&body, 1000).unwrap();
        assert_bounded(&p, 1000);
        assert_outcome(&p, &pieces, &lines, false);
    }

    #[test]
    fn an_array_keeps_every_good_element_and_names_every_bad_one(
        pieces in proptest::collection::vec(json_piece(), 0..150),
        pretty in any::<bool>(),
    ) {
        let sep = if pretty { ",\n  " } else { "," };
        let texts: Vec<String> = pieces.iter().map(|p| String::from_utf8(p.bytes()).unwrap()).collect();
        let body = format!("[{}]", texts.join(sep));
        let p = parse(body.as_bytes(), 1000).unwrap();
        assert_bounded(&p, 1000);
        let indexes: Vec<u64> = (0..pieces.len() as u64).collect();
        assert_outcome(&p, &pieces, &indexes, true);
    }

    #[test]
    fn an_array_with_invalid_utf8_inside_elements_keeps_every_other_element(
        pieces in proptest::collection::vec(json_piece(), 1..60),
        bad_at in proptest::collection::vec(any::<prop::sample::Index>(), 1..4),
    ) {
        // Valid JSON grammar, invalid UTF-8 inside a string: each such element is answered at its index.
        let mut pieces = pieces;
        for at in &bad_at {
            let k = at.index(pieces.len());
            pieces[k] = Piece::BadBytes(b"{\"type\": \"llm_turn_complete\", \"note\": \"\xff\xfe\"}".to_vec());
        }
        let mut body = b"[".to_vec();
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend(piece.bytes());
        }
        body.push(b']');
        let p = parse(&body, 1000).unwrap();
        assert_bounded(&p, 1000);
        let indexes: Vec<u64> = (0..pieces.len() as u64).collect();
        assert_outcome(&p, &pieces, &indexes, true);
    }

    #[test]
    fn one_event_alone_is_read_as_one_event(piece in any_piece(), pad in "[ \t\r\n]{0,4}") {
        prop_assume!(!piece.bytes().starts_with(b"["), "a lone array is an array body");
        let mut body = pad.clone().into_bytes();
        body.extend(piece.bytes());
        body.extend(pad.as_bytes());
        let p = parse(&body, 1).unwrap();
        assert_bounded(&p, 1);
        assert_eq!(p.events(), 1);
        assert_eq!(p.rejected(), u64::from(piece.is_bad()));
    }

    #[test]
    fn more_events_than_the_limit_are_refused_in_every_shape(
        n in 1usize..200,
        max_events in 1usize..200,
        shape in 0u8..3,
    ) {
        let values: Vec<String> = (0..n).map(|i| hive_turn(0, i as u32, 1).to_string()).collect();
        let body = match shape {
            0 => format!("[{}]", values.join(",")),
            1 => values.join("\n"),
            _ => format!("{}\n# garbage", values.join("\n")),
        };
        let events = n + usize::from(shape == 2);
        match parse(body.as_bytes(), max_events) {
            Ok(p) => {
                prop_assert!(events <= max_events);
                prop_assert_eq!(p.events() as usize, events);
            }
            Err(e) => {
                prop_assert!(events > max_events, "{} events refused at {}", events, max_events);
                prop_assert_eq!(e, TooManyEvents { limit: max_events });
            }
        }
    }

    #[test]
    fn the_array_scanner_finds_exactly_the_elements_serde_finds(
        elements in proptest::collection::vec(arb_json(), 0..30),
        pretty in any::<bool>(),
    ) {
        let array = Value::Array(elements);
        let body = if pretty { serde_json::to_string_pretty(&array).unwrap() } else { array.to_string() };
        let Split::Values(pieces) = split(body.as_bytes(), usize::MAX, 1000).unwrap() else {
            panic!("a valid array is read as one")
        };
        let found: Vec<Value> = pieces
            .iter()
            .map(|p| serde_json::from_slice(&body.as_bytes()[p.range.clone()]).unwrap())
            .collect();
        // Compared with serde's own reading of the same text (floats need not round-trip exactly).
        let expected: Vec<Value> = serde_json::from_str(&body).unwrap();
        prop_assert_eq!(found, expected);
        let indexes: Vec<Option<u64>> = pieces.iter().map(|p| p.index).collect();
        prop_assert_eq!(indexes, (0..pieces.len() as u64).map(Some).collect::<Vec<_>>());
    }
}

/// Arbitrary JSON, with strings full of the characters a scanner could trip on.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        "[\\[\\]{},:\"\\\\ a-z\u{e9}\u{1F41D}\\n\\t]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map("[\\[\\]{},:\"\\\\ a-z]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
