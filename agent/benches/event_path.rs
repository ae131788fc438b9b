//! The event path over fixed inputs, for counting instructions (`scripts/event-path-guard.sh` runs it
//! under valgrind's callgrind and compares with `agent/benches/event-path.baseline`). Wall-clock rates on
//! a shared machine vary by ±15–25%; instruction counts of the same input vary by well under 1%.
//!
//! Input: `fixtures/hive-mixed-1000.jsonl`, 1,000 consecutive lines of the peers' generated Hive debug
//! stream (`gen_hive.py --sessions 3000 --debug-log`, lines 100,001–101,000: 57% deltas, 11% chatty,
//! 32% durable, 30 sessions), one NDJSON body as `POST /v1/events` receives it.
//!
//! `event_path parse ROUNDS` parses the body ROUNDS times ([`parse_body`]: classify, adapt, redact,
//! prepare each kept event), the intake's work before the writer. `event_path commit GROUPS` parses it
//! once per group (every event id of group g made distinct), opens an outbox in a temporary directory and
//! submits the first GROUPS groups, each one transaction of the writer (its derived state included), then
//! closes it. The script takes differences of runs (parse 3 − parse 1; commit 2 − commit 1), so start-up,
//! the policy's compilation and the outbox's creation cancel out, and reports instructions per input
//! line. `commit` also prints the WAL frames and bytes each group's commit appended.

use std::path::Path;

use apiary_agent::config::IntakeSettings;
use apiary_agent::http::parse::{parse_body, Limits};
use apiary_agent::identity::IdentityDefaults;
use apiary_agent::outbox::{Item, Outbox, OutboxSettings};
use apiary_schema::hive::Zone;
use apiary_schema::{Policy, ProcessOptions};

const FIXTURE: &str = "benches/fixtures/hive-mixed-1000.jsonl";

fn body() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)).expect("the fixture")
}

fn limits() -> Limits {
    let mut l = Limits::from(&IntakeSettings::default());
    l.max_events = 1000;
    l
}

/// Parses `body` as the intake does, with the keyer of `outbox`'s colonies.
fn parse(body: &[u8], policy: &Policy, outbox: Option<&Outbox>) -> Vec<Item> {
    let keyer = outbox.map(|o| o.colony_keys().keyer());
    let opts = ProcessOptions {
        zone: Zone::Utc,
        colony: keyer.as_ref(),
        ..ProcessOptions::new(policy)
    };
    parse_body(body, &opts, limits())
        .expect("within the limits")
        .items
}

fn kept(items: &[Item]) -> usize {
    items.iter().filter(|i| matches!(i, Item::Kept(_))).count()
}

/// Group `g`'s copy: every event id changed (the first 8 bytes xor'ed with `g`), so no event of one group
/// is a duplicate of another's; sessions, times and bodies stay.
fn regroup(items: &mut [Item], g: u64) {
    for item in items {
        if let Item::Kept(e) = item {
            let (hi, lo) = e.event_id.as_u64_pair();
            e.event_id = uuid::Uuid::from_u64_pair(hi ^ g, lo);
        }
    }
}

/// The transactions in the outbox's WAL as it is now: (salts of its generation, frames of each
/// transaction in order). SQLite's WAL format: a 32-byte header (salts at bytes 16..24), then frames of a
/// 24-byte header (the database size after a commit at 4..8, nonzero on a transaction's last frame; the
/// generation's salts at 8..16) and one page. Frames of an earlier generation (left past a restart) end
/// the walk.
fn wal_transactions(dir: &Path) -> ([u8; 8], Vec<u64>) {
    let wal = std::fs::read(dir.join("outbox.db-wal")).unwrap_or_default();
    if wal.len() < 32 {
        return ([0; 8], Vec::new());
    }
    let page = u32::from_be_bytes(wal[8..12].try_into().expect("4 bytes")) as usize;
    let salts: [u8; 8] = wal[16..24].try_into().expect("8 bytes");
    let (mut at, mut frames, mut txs) = (32, 0u64, Vec::new());
    while at + 24 + page <= wal.len() && wal[at + 8..at + 16] == salts {
        frames += 1;
        if wal[at + 4..at + 8] != [0; 4] {
            txs.push(frames);
            frames = 0;
        }
        at += 24 + page;
    }
    (salts, txs)
}

/// Frames of the largest transaction committed since `before` (the group's own: the writer's other
/// commits meanwhile, a probe of a few frames, are smaller).
fn group_frames(before: &([u8; 8], Vec<u64>), after: &([u8; 8], Vec<u64>)) -> u64 {
    let new = match before.0 == after.0 {
        true => &after.1[before.1.len().min(after.1.len())..],
        false => &after.1[..],
    };
    new.iter().copied().max().unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; only an explicit mode runs anything.
    let (mode, n) = match args.as_slice() {
        [m, n, ..] if !m.starts_with('-') => (m.as_str(), n.parse::<u64>().expect("a count")),
        _ => {
            println!(
                "usage: event_path parse ROUNDS | commit GROUPS (scripts/event-path-guard.sh)"
            );
            return;
        }
    };
    let body = body();
    let policy = Policy::default_policy();
    match mode {
        "parse" => {
            let mut total = 0;
            for _ in 0..n {
                let items = parse(&body, &policy, None);
                total += kept(&items);
                drop(std::hint::black_box(items));
            }
            println!("parse: {n} rounds, {total} kept events");
        }
        "commit" => commit(&body, &policy, n),
        other => panic!("unknown mode {other}"),
    }
}

fn commit(body: &[u8], policy: &Policy, groups: u64) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let outbox = Outbox::open(
        &dir.path().join("outbox.db"),
        OutboxSettings::default(),
        IdentityDefaults::default(),
        policy,
    )
    .expect("the outbox opens");
    // Every group's items are made in every run (the script's difference is the commits alone).
    let prepared: Vec<Vec<Item>> = (0..2u64)
        .map(|g| {
            let mut items = parse(body, policy, Some(&outbox));
            regroup(&mut items, g);
            items
        })
        .collect();
    // Quiet gaps longer than the live stream's usage period (1 s) and the writer's idle wake-ups: each
    // group meets the same state whatever valgrind's pace (no usage row held back for being too recent,
    // the probe after opening done, the previous group checkpointed), so the runs differ by the groups'
    // commits alone.
    let gap = std::time::Duration::from_millis(1500);
    std::thread::sleep(gap);
    for (g, items) in prepared.into_iter().enumerate() {
        if g as u64 >= groups {
            std::thread::sleep(gap);
            continue;
        }
        let before = wal_transactions(dir.path());
        let events = kept(&items);
        let report = rt.block_on(outbox.submit(items)).expect("committed");
        assert_eq!(report.accepted as usize, events, "every event new");
        let frames = group_frames(&before, &wal_transactions(dir.path()));
        println!(
            "commit group {}: {events} events, {frames} WAL frames ({} KiB)",
            g + 1,
            frames * (8192 + 24) / 1024
        );
        std::thread::sleep(gap);
    }
    rt.block_on(outbox.close());
}
