//! Model-based test of the outbox: random sequences of enqueue / claim / ack / reject / fail / release /
//! sync toggles / restart, run against the real outbox and a simple in-memory model; after every step the
//! claimed ids, the counters and the balance equation must agree.

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use apiary_agent::outbox::{ClaimLimits, Delivery, Outbox, OutboxSettings, SyncChange};
use proptest::prelude::*;
use uuid::Uuid;

#[derive(Debug, Clone)]
enum Step {
    /// Enqueue events with these small ids (repeats are duplicates).
    Enqueue(Vec<u8>),
    Claim(u8),
    /// Settle the i-th in-flight claim (modulo their number) this way.
    Ack(u8, bool),
    Reject(u8),
    Fail(u8),
    Release(u8),
    SyncOn {
        include_backlog: bool,
    },
    SyncOff,
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => prop::collection::vec(0u8..40, 1..6).prop_map(Step::Enqueue),
        3 => (1u8..8).prop_map(Step::Claim),
        2 => (any::<u8>(), any::<bool>()).prop_map(|(i, d)| Step::Ack(i, d)),
        1 => any::<u8>().prop_map(Step::Reject),
        1 => any::<u8>().prop_map(Step::Fail),
        1 => any::<u8>().prop_map(Step::Release),
        1 => any::<bool>().prop_map(|b| Step::SyncOn { include_backlog: b }),
        1 => Just(Step::SyncOff),
        1 => Just(Step::Restart),
    ]
}

/// The in-memory model.
#[derive(Debug, Default)]
struct Model {
    sync: bool,
    /// Pending ids in commit order, with `held`.
    pending: Vec<(Uuid, bool)>,
    /// Ids that reached a terminal state.
    settled: BTreeSet<Uuid>,
    attempts: HashMap<Uuid, u32>,
    in_flight: BTreeSet<Uuid>,
    counters: BTreeMap<&'static str, u64>,
}

impl Model {
    fn bump(&mut self, k: &'static str) {
        *self.counters.entry(k).or_default() += 1;
    }

    fn enqueue(&mut self, id: Uuid) {
        self.bump("received");
        if self.settled.contains(&id) || self.pending.iter().any(|(p, _)| *p == id) {
            self.bump("duplicate");
        } else {
            self.pending.push((id, !self.sync));
        }
    }

    fn claim(&mut self, n: usize) -> Vec<Uuid> {
        if !self.sync {
            return vec![];
        }
        let ids: Vec<Uuid> = self
            .pending
            .iter()
            .filter(|(id, held)| !held && !self.in_flight.contains(id))
            .map(|(id, _)| *id)
            .take(n)
            .collect();
        self.in_flight.extend(ids.iter().copied());
        ids
    }

    fn finish(&mut self, id: Uuid, counter: &'static str) -> bool {
        self.in_flight.remove(&id);
        let Some(pos) = self.pending.iter().position(|(p, _)| *p == id) else {
            return false;
        };
        self.pending.remove(pos);
        self.settled.insert(id);
        self.bump(counter);
        true
    }

    fn pick(&self, i: u8) -> Option<Uuid> {
        if self.in_flight.is_empty() {
            return None;
        }
        self.in_flight
            .iter()
            .nth(i as usize % self.in_flight.len())
            .copied()
    }
}

struct Harness {
    dir: tempfile::TempDir,
    outbox: Outbox,
    model: Model,
}

impl Harness {
    async fn run(&mut self, step: &Step) {
        let m = &mut self.model;
        match step {
            Step::Enqueue(ids) => {
                let items = ids.iter().map(|n| support::event(*n as u128)).collect();
                self.outbox.submit(items).await.unwrap();
                for n in ids {
                    m.enqueue(support::id(*n as u128));
                }
            }
            Step::Claim(n) => {
                let limits = ClaimLimits {
                    max_events: *n as usize,
                    max_bytes: 1 << 20,
                };
                let claimed = self.outbox.claim(limits).await.unwrap();
                let expected = m.claim(*n as usize);
                assert_eq!(claimed.ids(), expected, "claim({n})");
                for e in &claimed.events {
                    assert_eq!(
                        e.attempts,
                        m.attempts.get(&e.event_id).copied().unwrap_or(0)
                    );
                }
                if !claimed.events.is_empty() {
                    assert!(
                        !claimed.sessions.is_empty(),
                        "bindings travel with the batch"
                    );
                }
            }
            Step::Ack(i, delivered) => {
                let Some(id) = m.pick(*i) else { return };
                let d = if *delivered {
                    Delivery::Delivered
                } else {
                    Delivery::Duplicate
                };
                let r = self.outbox.ack(vec![(id, d)]).await.unwrap();
                let counter = if *delivered { "delivered" } else { "duplicate" };
                assert_eq!(r.settled == 1, m.finish(id, counter));
            }
            Step::Reject(i) => {
                let Some(id) = m.pick(*i) else { return };
                let r = self.outbox.reject(vec![(id, "bad".into())]).await.unwrap();
                assert_eq!(r.settled == 1, m.finish(id, "rejected"));
            }
            Step::Fail(i) => {
                let Some(id) = m.pick(*i) else { return };
                self.outbox
                    .fail(vec![id], Duration::ZERO, "boom")
                    .await
                    .unwrap();
                m.in_flight.remove(&id);
                if m.pending.iter().any(|(p, _)| *p == id) {
                    *m.attempts.entry(id).or_default() += 1;
                }
            }
            Step::Release(i) => {
                let Some(id) = m.pick(*i) else { return };
                self.outbox.release(vec![id]).await.unwrap();
                m.in_flight.remove(&id);
            }
            Step::SyncOn { include_backlog } => {
                let change = SyncChange::Enable {
                    endpoint: "https://ingest.example".into(),
                    token_file: "/dev/null".into(),
                    include_backlog: *include_backlog,
                };
                self.outbox.set_sync(change).await.unwrap();
                m.sync = true;
                if *include_backlog {
                    for (_, held) in m.pending.iter_mut() {
                        *held = false;
                    }
                }
            }
            Step::SyncOff => {
                let change = SyncChange::Disable { purge: false };
                self.outbox.set_sync(change).await.unwrap();
                m.sync = false;
            }
            Step::Restart => {
                self.outbox.close().await;
                self.outbox = support::open(self.dir.path(), OutboxSettings::default());
                m.in_flight.clear();
            }
        }
        self.check().await;
    }

    async fn check(&self) {
        let s = self.outbox.status().await.unwrap();
        let c = s.stored.counters;
        let m = &self.model.counters;
        let g = |k: &str| m.get(k).copied().unwrap_or(0);
        assert_eq!(c.received, g("received"));
        assert_eq!(c.delivered, g("delivered"));
        assert_eq!(c.duplicate, g("duplicate"));
        assert_eq!(c.rejected, g("rejected"));
        assert_eq!(c.pending, self.model.pending.len() as u64);
        // Every test event's body has the same length; settling subtracts the claimed row's bytes.
        let body_len = match support::event(0) {
            apiary_agent::outbox::Item::Kept(e) => e.body.len() as u64,
            _ => unreachable!(),
        };
        assert_eq!(s.stored.pending_bytes, c.pending * body_len);
        assert!(c.balanced(), "{c:?}");
        let held = self.model.pending.iter().filter(|(_, h)| *h).count() as u64;
        assert_eq!(s.stored.held_events, held);
        assert_eq!(s.stored.dead_letters, g("rejected"));
    }
}

fn run_case(steps: Vec<Step>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let outbox = support::open(dir.path(), OutboxSettings::default());
        let mut h = Harness {
            dir,
            outbox,
            model: Model::default(),
        };
        for s in &steps {
            h.run(s).await;
        }
        h.outbox.close().await;
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn outbox_behaves_like_the_model(steps in prop::collection::vec(step(), 1..40)) {
        run_case(steps);
    }
}

#[test]
fn retry_state_survives_a_restart() {
    run_case(vec![
        Step::SyncOn {
            include_backlog: false,
        },
        Step::Enqueue(vec![1, 2]),
        Step::Claim(2),
        Step::Fail(0),
        Step::Restart,
        Step::Claim(2),
        Step::Fail(0),
        Step::Fail(1),
        Step::Claim(2),
    ]);
}
