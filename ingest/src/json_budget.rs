//! A counting pre-pass over a JSON body, run before any `serde_json::Value` is built.
//!
//! ## Why
//! A value tree costs far more than its text: `[0,0,0,…]` is 2 bytes per element as text and 32 bytes (plus
//! the array's doubling slack) as `Value`s, an object member about 100 bytes. A 60 KiB gzip body inflating
//! to 64 MiB of `0,` therefore built a 1–2 GiB tree before the batch-size check could refuse it (measured on
//! the real binary, see the commit that added this module). Counting first bounds the tree by the *number*
//! of values, not only by the bytes.
//!
//! ## What is counted
//! Every token that becomes an allocation when parsed: each string (object keys included), number, literal
//! (`true`, `false`, `null`), and each `[` / `{` counts 1; an object member (its `:`) counts 2 more, as a
//! map entry (key string, value, tree node) costs about three array elements. The scan is a single pass over the bytes with no
//! allocation; it does not validate (serde_json does that next), but on any input whose prefix is valid
//! JSON it never undercounts that prefix, and serde_json stops building at the first syntax error — so the
//! tree it builds is always within the counted budget. It stops as soon as the budget is exceeded.
//!
//! ## The budget
//! `max_batch_events × VALUES_PER_EVENT + ENVELOPE_VALUES` ([`value_budget`]). The largest canonical
//! event the default policy allows (all 15 envelope fields, the 15 `data` fields of `health.signal`) counts
//! 122; a typical `llm.turn` about 70, and the agent sends at most 1,000 events per batch, a tenth of the
//! default `max_batch_events`. Measured worst cases at the budget of the default 10,000 events (peak RSS
//! growth of the real binary for one request): 1.28 M zeros in an array +42 MiB; 320 k unique-key object
//! members +93 MiB (640 k of them, when a member counted 1 like an array element, took +140 MiB).

/// Tokens a single event may use on average (keys, values, containers).
pub const VALUES_PER_EVENT: usize = 128;

/// Tokens allowed for the batch envelope and its `sessions[]` bindings on top of the events' share.
pub const ENVELOPE_VALUES: usize = 4096;

/// The largest token count [`check`] accepts for a batch of at most `max_batch_events` events.
pub fn value_budget(max_batch_events: usize) -> usize {
    max_batch_events
        .saturating_mul(VALUES_PER_EVENT)
        .saturating_add(ENVELOPE_VALUES)
}

/// The body holds more tokens than the budget (the scan stopped there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the body holds more than {budget} JSON values")]
pub struct OverBudget {
    pub budget: usize,
}

/// Counts the JSON tokens of `body` (see the module notes); Err as soon as there are more than `budget`.
pub fn check(body: &[u8], budget: usize) -> Result<usize, OverBudget> {
    let mut count = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut in_scalar = false;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        let starts = match b {
            b'"' => {
                in_string = true;
                in_scalar = false;
                true
            }
            b'[' | b'{' => {
                in_scalar = false;
                true
            }
            b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'-' | b'+' | b'.' => {
                let first = !in_scalar;
                in_scalar = true;
                first
            }
            b':' => {
                in_scalar = false;
                count += 2;
                false
            }
            _ => {
                in_scalar = false;
                false
            }
        };
        if starts {
            count += 1;
        }
        if (starts || b == b':') && count > budget {
            return Err(OverBudget { budget });
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_value_and_container_counts_once() {
        assert_eq!(check(b"[]", 10), Ok(1));
        assert_eq!(check(b"[0,0,0]", 10), Ok(4));
        assert_eq!(check(br#"{"a":1,"b":[true,null,-1.5e3]}"#, 20), Ok(12));
        assert_eq!(check(br#" { "k" : "v" } "#, 10), Ok(5));
    }

    #[test]
    fn brackets_quotes_and_digits_inside_strings_are_not_counted() {
        assert_eq!(check(br#"["[0,:{}]", "a\"[1,2]\\", "\\\\"]"#, 10), Ok(4));
    }

    #[test]
    fn the_scan_stops_at_the_budget() {
        let body = format!("[{}0]", "0,".repeat(1_000_000));
        assert_eq!(
            check(body.as_bytes(), 1000),
            Err(OverBudget { budget: 1000 })
        );
        assert_eq!(check(body.as_bytes(), 1_000_002), Ok(1_000_002));
    }

    /// The count is never below the number of values serde_json builds (for valid JSON).
    #[test]
    fn the_count_covers_what_serde_builds() {
        fn tokens(v: &serde_json::Value) -> usize {
            match v {
                serde_json::Value::Array(a) => 1 + a.iter().map(tokens).sum::<usize>(),
                serde_json::Value::Object(o) => {
                    1 + o.values().map(|v| 3 + tokens(v)).sum::<usize>()
                }
                _ => 1,
            }
        }
        for text in [
            r#"{"schema_version":1,"events":[{"a":"x\"y","b":[1,2,{"c":null}]}],"s":-0.5}"#,
            r#"[[[]],{},"",0,true,false,null,1e-9]"#,
        ] {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(check(text.as_bytes(), usize::MAX), Ok(tokens(&v)), "{text}");
        }
    }
}
