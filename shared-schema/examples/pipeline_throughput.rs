//! Prints how many events per second one core pushes through parse → adapt → redact, on the fixture day.
use std::time::Instant;

use apiary_schema::hive::Zone;
use apiary_schema::{process_value, Policy, ProcessOptions};

fn main() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/hive/day/event_logs/20261103_090000.jsonl"
    );
    let text = std::fs::read_to_string(path).expect("fixture");
    let lines: Vec<&str> = text.lines().collect();
    let policy = Policy::default_policy();
    let opts = ProcessOptions {
        policy: &policy,
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
        colony: None,
    };
    let mut rates = Vec::new();
    for _ in 0..7 {
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed().as_millis() < 300 {
            for line in &lines {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                std::hint::black_box(process_value(&v, &opts).unwrap());
                n += 1;
            }
        }
        rates.push(n as f64 / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "parse+adapt+redact: median {:.0} events/s per core ({} runs)",
        rates[rates.len() / 2],
        rates.len()
    );
}
