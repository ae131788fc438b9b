//! Drop reports: evictions and dead letters not yet reported upstream become `outbox.dropped` events
//! (device-level, one per reason, `data = {reason, count}`), committed like any other event in the same
//! transaction that zeroes the `drops_unreported.<reason>` counters — so each drop is reported once.
//! Ids are UUID v5 over the device id and a persisted report sequence number.

use apiary_schema::{AgentRole, CanonicalEvent, EventKind};
use chrono::{TimeZone, Utc};
use uuid::Uuid;

use super::item::PreparedEvent;
use super::store;
use super::writer::{Ctx, Op, Reply};
use super::{intake, OutboxError};

/// Namespace of ids of events the agent makes itself (UUID v5).
pub const AGENT_NAMESPACE: Uuid = Uuid::from_u128(0x3c9e_0b51_77d4_4f0a_9a6e_5d21_c4b8_e902);

/// Turns unreported drops (evictions, dead letters) into `outbox.dropped` events, one per reason.
pub(crate) struct DropReport {
    pub reply: Reply<Vec<Uuid>>,
}

impl Op for DropReport {
    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<()> {
        self.reply.reset();
        let counters = store::read_counter_map(ctx.conn)?;
        let device = ctx.state.defaults.device_id.clone().unwrap_or_default();
        let mut made = Vec::new();
        for (name, n) in counters {
            let Some(reason) = name.strip_prefix(store::DROPS_UNREPORTED) else {
                continue;
            };
            if n <= 0 {
                continue;
            }
            let seq: i64 = store::get_meta(ctx.conn, "drop_report_seq")?
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
                + 1;
            store::set_meta(ctx.conn, "drop_report_seq", &seq.to_string())?;
            let event = dropped_event(&device, seq, reason, n, ctx.now_ms);
            intake::try_insert_event(ctx, &PreparedEvent::new(&event))?;
            ctx.count(store::RECEIVED, 1);
            ctx.count(&name, -n);
            made.push(event.event_id);
        }
        self.reply.set(Ok(made));
        Ok(())
    }
    fn finish(mut self: Box<Self>, committed: Result<(), OutboxError>) {
        self.reply.send(committed);
    }
}

fn dropped_event(device: &str, seq: i64, reason: &str, n: i64, now_ms: i64) -> CanonicalEvent {
    let name = format!("{device}:outbox.dropped:{seq}:{reason}");
    let mut data = serde_json::Map::new();
    data.insert("reason".into(), reason.into());
    data.insert("count".into(), n.into());
    CanonicalEvent {
        schema_version: apiary_schema::SCHEMA_VERSION,
        event_id: Uuid::new_v5(&AGENT_NAMESPACE, name.as_bytes()),
        kind: EventKind::OutboxDropped,
        occurred_at: Utc
            .timestamp_millis_opt(now_ms)
            .single()
            .unwrap_or_default(),
        runtime: "apiary-agent".into(),
        session_id: None,
        parent_session_id: None,
        colony_id: None,
        worker_id: None,
        agent_role: None::<AgentRole>,
        node_id: None,
        execution_id: None,
        trace_id: None,
        native_type: "outbox.dropped".into(),
        data,
    }
}
