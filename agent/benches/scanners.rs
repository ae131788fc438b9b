//! The intake's hand-written JSON scanners against serde_json doing the same job, on realistic input
//! (`cargo bench --workspace --bench scanners`). Prints, per pair, the median time of several rounds and
//! their ratio; each round is timed alone, the pairs alternate inside a round so a noisy neighbour hits
//! both.
//!
//! Input: `fixtures/hive-mixed-1000.jsonl` (see `event_path.rs`: 1,000 consecutive lines of a Hive
//! debug stream, 57% deltas, 11% chatty, 32% durable).
//!
//! 1. **array split**: the lines as one JSON array body (`[l1,\nl2,…]`, 1,000 elements, ~430 KB), split
//!    into element ranges by [`split`] (an `IgnoredAny` pass that checks and counts, then a byte scanner
//!    for the ranges) and by one pass of `&RawValue` elements (ranges from the slices' offsets, the same
//!    count bound). Both must find the same ranges.
//! 2. **sniff**: every line through [`sniff_filtered`] (a memmem look at the first `"type"` that sends a
//!    durable line straight to the full path, a vectorised bracket count before the nesting walk, then a
//!    borrowed-field `from_slice`), and through the plain `from_slice` of the same fields followed by the
//!    same classification. Both must give the same verdicts.
//!
//! Environment: `BENCH_ROUNDS` (default 9), `BENCH_REPS` (bodies or passes over the lines per round,
//! default 50).

mod common;

use std::borrow::Cow;
use std::hint::black_box;
use std::ops::Range;
use std::path::Path;
use std::time::Instant;

use apiary_agent::http::split::{split, Split};
use apiary_schema::hive::{self, FilterReason};
use apiary_schema::pipeline::sniff_filtered;
use common::{env_usize, median};
use serde::de::{Deserializer as _, SeqAccess, Visitor};
use serde_json::value::RawValue;

const FIXTURE: &str = "benches/fixtures/hive-mixed-1000.jsonl";

fn main() {
    let rounds = env_usize("BENCH_ROUNDS", 9);
    let reps = env_usize("BENCH_REPS", 50);
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE))
        .expect("the fixture");
    let lines: Vec<&str> = text.lines().collect();
    let body = format!("[{}]", lines.join(",\n")).into_bytes();

    // The two array splits agree.
    let Ok(Split::Values(pieces)) = split(&body, 1 << 20, 10_000) else {
        panic!("the array splits into values")
    };
    let scanned: Vec<Range<usize>> = pieces.into_iter().map(|p| p.range).collect();
    assert_eq!(Some(scanned), raw_value_ranges(&body, 10_000));
    // The two sniffs agree.
    for line in &lines {
        assert_eq!(sniff_filtered(line), plain_sniff(line.as_bytes()), "{line}");
    }

    let (mut scan, mut raw, mut sniff, mut plain) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        scan.push(time(reps, || {
            black_box(split(black_box(&body), 1 << 20, 10_000).is_ok());
        }));
        raw.push(time(reps, || {
            black_box(raw_value_ranges(black_box(&body), 10_000));
        }));
        sniff.push(time(reps, || {
            for l in &lines {
                black_box(sniff_filtered(black_box(l)));
            }
        }));
        plain.push(time(reps, || {
            for l in &lines {
                black_box(plain_sniff(black_box(l.as_bytes())));
            }
        }));
    }
    let per = |v: Vec<f64>| median(v) / reps as f64;
    let (scan, raw, sniff, plain) = (per(scan), per(raw), per(sniff), per(plain));
    println!(
        "array split, {} KB body of {} events, median of {rounds} rounds x {reps}:",
        body.len() / 1000,
        lines.len()
    );
    println!("  count + byte scanner (split)  {:>9.1} us", scan * 1e6);
    println!("  one pass of &RawValue         {:>9.1} us", raw * 1e6);
    println!("  scanner / RawValue            {:>9.2}", scan / raw);
    println!(
        "sniff, {} lines, median of {rounds} rounds x {reps}:",
        lines.len()
    );
    println!("  sniff_filtered                {:>9.1} us", sniff * 1e6);
    println!("  plain from_slice of the fields{:>9.1} us", plain * 1e6);
    println!("  from_slice / sniff_filtered   {:>9.2}", plain / sniff);
}

/// Seconds for `reps` calls of `f`.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..reps {
        f();
    }
    t.elapsed().as_secs_f64()
}

/// The element ranges of `body` (one JSON array) from one pass of borrowed `&RawValue`s; `None` past
/// `max` elements or when the body is not one array.
fn raw_value_ranges(body: &[u8], max: usize) -> Option<Vec<Range<usize>>> {
    struct Elements<'b> {
        base: usize,
        max: usize,
        _body: std::marker::PhantomData<&'b ()>,
    }
    impl<'de> Visitor<'de> for Elements<'de> {
        type Value = Vec<Range<usize>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut ranges = Vec::new();
            while let Some(raw) = seq.next_element::<&'de RawValue>()? {
                if ranges.len() == self.max {
                    return Err(serde::de::Error::custom("too many events"));
                }
                let start = raw.get().as_ptr() as usize - self.base;
                ranges.push(start..start + raw.get().len());
            }
            Ok(ranges)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let ranges = (&mut de)
        .deserialize_seq(Elements {
            base: body.as_ptr() as usize,
            max,
            _body: std::marker::PhantomData,
        })
        .ok()?;
    de.end().ok()?;
    Some(ranges)
}

/// [`sniff_filtered`] without its shortcuts: the borrowed fields read by `from_slice`, then classified.
fn plain_sniff(line: &[u8]) -> Option<(FilterReason, Cow<'_, str>)> {
    use serde::de::IgnoredAny;
    #[derive(Default)]
    struct Present(bool);
    impl<'de> serde::Deserialize<'de> for Present {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Present, D::Error> {
            IgnoredAny::deserialize(d).map(|_| Present(true))
        }
    }
    #[derive(serde::Deserialize)]
    struct Sniff<'a> {
        #[serde(rename = "type", borrow)]
        native_type: Option<Cow<'a, str>>,
        #[serde(default)]
        schema_version: Present,
        #[serde(default)]
        event_id: Present,
    }
    if line.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let sniff: Sniff<'_> = serde_json::from_slice(line).ok()?;
    if sniff.schema_version.0 && sniff.event_id.0 {
        return None;
    }
    let native_type = sniff.native_type?;
    let reason = match hive::classify(&native_type) {
        None => FilterReason::UnknownType,
        Some(hive::Classification::Filtered(reason)) => reason,
        Some(hive::Classification::Durable(..)) => return None,
    };
    Some((reason, native_type))
}
