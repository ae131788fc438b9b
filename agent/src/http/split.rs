//! Splitting an intake body into the byte ranges of its events — counted and bounded before any value
//! is built.
//!
//! A body is one of three shapes:
//! 1. **array**: the whole body is one JSON array, its elements' ranges found without building them
//!    (see below). A body that starts with `[` but is not one valid array (an NDJSON body whose first
//!    line is an array, a truncated array) is read as one of the next two shapes, so its readable lines
//!    are still kept.
//! 2. **values**: a stream of JSON values separated by whitespace (one object, pretty-printed or not, or
//!    NDJSON), again skimmed with `IgnoredAny`; each value's range and line are kept.
//! 3. **lines**: when the stream does not parse, or one value spans more than `max_line` bytes, every
//!    non-empty line is one event (so each bad line gets its own error and the good ones are kept).
//!
//! In every shape, more than `max_events` events refuse the whole body ([`TooManyEvents`]) before a
//! single value is built, so the work and memory of a request are bounded by its size *and* its event
//! count: a 2 MiB body of `[0,0,…]` is a million events and is refused outright. Only the first
//! `max_events` ranges are stored (16 bytes and a position each); past that, events are only counted.
//!
//! An array is split by one pass of borrowed `serde_json::value::RawValue` elements (the element ranges
//! are the slices' offsets; the count bound is checked as each element is read). Measured (`cargo bench
//! --workspace --bench scanners`, an array of the 1,000 lines of `benches/fixtures/hive-mixed-1000.jsonl`,
//! 371 KB, medians of 9 rounds of 50 bodies, two runs): 0.55–0.59 ms a body, where the count-then-scan
//! below took 1.88–2.04 ms, 3.2–3.7× more, for the same ranges. A `RawValue` also checks its element's
//! UTF-8, which the JSON grammar pass does not: an array with invalid UTF-8 inside one element fails that
//! pass, and only then is it checked and counted with [`serde::de::IgnoredAny`] and its ranges found by a
//! byte scanner that may rely on the array being valid JSON (commas and the closing bracket outside
//! strings at depth 1), so that element is still answered at its index and the others are kept.

use std::ops::Range;

use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// The body holds more events than a request may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the body holds more than {limit} events")]
pub struct TooManyEvents {
    pub limit: usize,
}

/// Where one event sits in the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Its bytes (trimmed of surrounding whitespace).
    pub range: Range<usize>,
    /// 1-based line of its first byte (values and lines).
    pub line: Option<u64>,
    /// 0-based position in the array (arrays).
    pub index: Option<u64>,
}

/// A body split into events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split {
    /// An array or a stream of values: each piece is valid JSON syntax.
    Values(Vec<Piece>),
    /// Line by line: each piece is a non-empty line, to be checked (length, UTF-8, JSON) on its own.
    Lines(Vec<Piece>),
}

/// Splits `body` (see the module notes).
pub fn split(body: &[u8], max_line: usize, max_events: usize) -> Result<Split, TooManyEvents> {
    let too_many = TooManyEvents { limit: max_events };
    let trimmed = body.trim_ascii_start();
    if trimmed.starts_with(b"[") {
        let offset = body.len() - trimmed.len();
        match raw_elements(trimmed, offset, max_events) {
            Ok(None) => return Err(too_many),
            Ok(Some(pieces)) => return Ok(Split::Values(pieces)),
            Err(_) => {}
        }
        match count_array(trimmed, max_events) {
            Ok(None) => return Err(too_many),
            Ok(Some(n)) => return Ok(Split::Values(array_elements(trimmed, offset, n))),
            Err(_) => {}
        }
    }
    if let Some(pieces) = values(body, max_line, max_events)? {
        return Ok(Split::Values(pieces));
    }
    lines(body, max_events).map(Split::Lines)
}

/// The elements of `array` (one valid JSON array whose elements are valid UTF-8, starting at `array[0]`,
/// `offset` into the body), from one pass of borrowed [`RawValue`]s; `None` as soon as there are more
/// than `max` (the rest is not read). An error for anything else, invalid UTF-8 in an element included.
fn raw_elements(array: &[u8], offset: usize, max: usize) -> serde_json::Result<Option<Vec<Piece>>> {
    struct Elements<'a> {
        base: usize,
        offset: usize,
        max: usize,
        over: &'a std::cell::Cell<bool>,
    }
    impl<'de> Visitor<'de> for Elements<'_> {
        type Value = Vec<Piece>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Piece>, A::Error> {
            let mut pieces = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.max));
            while let Some(raw) = seq.next_element::<&'de RawValue>()? {
                if pieces.len() == self.max {
                    self.over.set(true);
                    return Err(serde::de::Error::custom("too many events"));
                }
                let start = raw.get().as_ptr() as usize - self.base + self.offset;
                pieces.push(Piece {
                    range: start..start + raw.get().len(),
                    line: None,
                    index: Some(pieces.len() as u64),
                });
            }
            Ok(pieces)
        }
    }
    let over = std::cell::Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(array);
    let elements = Elements {
        base: array.as_ptr() as usize,
        offset,
        max,
        over: &over,
    };
    let read = serde::Deserializer::deserialize_seq(&mut de, elements);
    if over.get() {
        return Ok(None);
    }
    let pieces = read?;
    de.end()?;
    Ok(Some(pieces))
}

/// Checks that `array` is one valid JSON array and counts its elements; `None` as soon as there are
/// more than `max` (the rest is not read).
fn count_array(array: &[u8], max: usize) -> serde_json::Result<Option<usize>> {
    struct Count<'a> {
        max: usize,
        over: &'a std::cell::Cell<bool>,
    }
    impl<'de> Visitor<'de> for Count<'_> {
        type Value = usize;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
            let mut n = 0;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
                if n > self.max {
                    self.over.set(true);
                    return Err(serde::de::Error::custom("too many events"));
                }
            }
            Ok(n)
        }
    }
    let over = std::cell::Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(array);
    let counted = serde::Deserializer::deserialize_seq(&mut de, Count { max, over: &over });
    if over.get() {
        return Ok(None);
    }
    let n = counted?;
    de.end()?;
    Ok(Some(n))
}

/// The ranges of the `n` elements of a valid JSON array that starts at `array[0]` (`offset` into the body).
fn array_elements(array: &[u8], offset: usize, n: usize) -> Vec<Piece> {
    let mut pieces = Vec::with_capacity(n);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut start = None;
    for (i, &b) in array.iter().enumerate().skip(1) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => continue,
            b',' | b']' if depth == 0 => {
                if let Some(s) = start.take() {
                    let index = Some(pieces.len() as u64);
                    let end = s + array[s..i].trim_ascii_end().len();
                    pieces.push(Piece {
                        range: offset + s..offset + end,
                        line: None,
                        index,
                    });
                }
                if b == b']' {
                    break;
                }
                continue;
            }
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth -= 1,
            _ => {}
        }
        start.get_or_insert(i);
    }
    pieces
}

/// The stream of values, or `None` when the body must be read line by line.
fn values(
    body: &[u8],
    max_line: usize,
    max_events: usize,
) -> Result<Option<Vec<Piece>>, TooManyEvents> {
    let mut stream = serde_json::Deserializer::from_slice(body).into_iter::<IgnoredAny>();
    let mut pieces = Vec::new();
    let (mut start, mut line, mut count) = (0usize, 1u64, 0usize);
    while let Some(next) = stream.next() {
        if next.is_err() {
            return Ok(None);
        }
        let end = stream.byte_offset();
        let gap = &body[start..end];
        let at = gap.len() - gap.trim_ascii_start().len();
        line += newlines(&gap[..at]);
        if end - start - at > max_line {
            return Ok(None);
        }
        count += 1;
        if count <= max_events {
            pieces.push(Piece {
                range: start + at..end,
                line: Some(line),
                index: None,
            });
        }
        line += newlines(&gap[at..]);
        start = end;
    }
    if count > max_events {
        return Err(TooManyEvents { limit: max_events });
    }
    Ok(Some(pieces))
}

/// Every non-empty line (trimmed), numbered from 1.
pub fn lines(body: &[u8], max_events: usize) -> Result<Vec<Piece>, TooManyEvents> {
    // Sized once (a vector grown by doubling to a thousand pieces cost 5% of the parse in reallocations
    // and glibc's consolidation of freed blocks); lines found with memchr, not byte by byte.
    let mut pieces =
        Vec::with_capacity(memchr::memchr_iter(b'\n', body).count().min(max_events) + 1);
    let mut start = 0usize;
    let ends = memchr::memchr_iter(b'\n', body).chain(std::iter::once(body.len()));
    for (i, end) in ends.enumerate() {
        let raw = &body[start..end];
        let lead = raw.len() - raw.trim_ascii_start().len();
        let len = raw.trim_ascii().len();
        if len > 0 {
            if pieces.len() == max_events {
                return Err(TooManyEvents { limit: max_events });
            }
            pieces.push(Piece {
                range: start + lead..start + lead + len,
                line: Some(i as u64 + 1),
                index: None,
            });
        }
        start = end + 1;
    }
    Ok(pieces)
}

fn newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|b| **b == b'\n').count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(body: &str, split: &Split) -> Vec<String> {
        let (Split::Values(p) | Split::Lines(p)) = split;
        p.iter()
            .map(|p| body[p.range.clone()].to_string())
            .collect()
    }

    #[test]
    fn array_elements_are_found_outside_strings_and_nesting() {
        let body = r#"  [ {"a": "x,]\"}"}, [1, [2]] ,"s\\", 3 ]"#;
        let s = split(body.as_bytes(), 1 << 20, 10).unwrap();
        assert_eq!(
            texts(body, &s),
            vec![r#"{"a": "x,]\"}"}"#, "[1, [2]]", r#""s\\""#, "3"]
        );
        assert_eq!(split(b"[]", 10, 10).unwrap(), Split::Values(Vec::new()));
        // Not one array: read as values (then lines), so what is readable is kept.
        let body = "[1, [2]]\n{\"a\": 1}\n";
        let s = split(body.as_bytes(), 100, 10).unwrap();
        assert!(matches!(s, Split::Values(_)), "{s:?}");
        assert_eq!(texts(body, &s), vec!["[1, [2]]", "{\"a\": 1}"]);
        let body = "[1, 2\n{\"a\": 1}\n";
        let s = split(body.as_bytes(), 100, 10).unwrap();
        assert_eq!(texts(body, &s), vec!["[1, 2", "{\"a\": 1}"]);
    }

    #[test]
    fn more_events_than_the_limit_refuse_the_body_in_every_shape() {
        let limit = TooManyEvents { limit: 3 };
        assert_eq!(split(b"[0,0,0,0]", 10, 3), Err(limit));
        assert!(split(b"[0,0,0]", 10, 3).is_ok());
        assert_eq!(split(b"0 0 0 0", 10, 3), Err(limit));
        assert_eq!(split(b"{\n}\n{\n}\n{\n}\n{\n}\n{x", 10, 3), Err(limit));
        assert!(split(b"{x\n\n\n{y\n{z\n", 10, 3).is_ok());
    }

    #[test]
    fn values_carry_their_lines_and_a_bad_stream_falls_back_to_lines() {
        let body = "{\"a\": 1}\n\n  {\n\"b\": 2}\n";
        let s = split(body.as_bytes(), 100, 10).unwrap();
        let Split::Values(p) = &s else { panic!() };
        assert_eq!(
            p.iter().map(|p| p.line).collect::<Vec<_>>(),
            vec![Some(1), Some(3)]
        );
        let body = "{\"a\": 1}\n{oops\n {\"c\": 3} \n";
        let s = split(body.as_bytes(), 100, 10).unwrap();
        assert!(matches!(s, Split::Lines(_)));
        assert_eq!(texts(body, &s), vec!["{\"a\": 1}", "{oops", "{\"c\": 3}"]);
        let long = format!("{{\"a\": \"{}\"}}", "x".repeat(200));
        assert!(matches!(
            split(long.as_bytes(), 100, 10).unwrap(),
            Split::Lines(_)
        ));
    }
}
