//! Drop reports: evictions and dead letters not yet reported upstream become `outbox.dropped` events
//! (device-level, one per reason, the shared `apiary_schema::device::DropReport` `{reason, count}`), committed like any other event in the same
//! transaction that zeroes the `drops_unreported.<reason>` counters — so each drop is reported once.
//! Ids are UUID v5 over the device id and a persisted report sequence number.

use apiary_schema::device::DropReport as DropPayload;
use apiary_schema::CanonicalEvent;
use chrono::{TimeZone, Utc};
use uuid::Uuid;

use super::intake;
use super::op::{Ctx, Task};
use super::store;
use crate::outbox::error::OutboxError;
use crate::outbox::record::counters::{Counter, DropReason};
use crate::outbox::record::item::PreparedEvent;

/// Namespace of ids of events the agent makes itself (UUID v5).
pub const AGENT_NAMESPACE: Uuid = Uuid::from_u128(0x3c9e_0b51_77d4_4f0a_9a6e_5d21_c4b8_e902);

/// Turns unreported drops (evictions, dead letters) into `outbox.dropped` events, one per reason.
pub(crate) struct DropReport;

impl Task for DropReport {
    type Output = Vec<Uuid>;

    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<Result<Vec<Uuid>, OutboxError>> {
        let counters = store::read_counter_map(ctx.conn)?;
        let device = ctx.defaults().device_id.clone().unwrap_or_default();
        let mut made = Vec::new();
        for (name, n) in counters {
            let Some(reason) = DropReason::from_counter_name(&name) else {
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
            let event = dropped_event(&device, seq, reason.as_str(), n, ctx.now_ms);
            let conn = ctx.conn;
            let mut statements = intake::EventStatements::prepare(conn)?;
            intake::try_insert_event(ctx, &mut statements, &PreparedEvent::new(&event))?;
            ctx.count(Counter::Received, 1);
            ctx.count(Counter::Unreported(reason), -n);
            made.push(event.event_id);
        }
        Ok(Ok(made))
    }
}

fn dropped_event(device: &str, seq: i64, reason: &str, n: i64, now_ms: i64) -> CanonicalEvent {
    let report = DropPayload {
        reason: reason.to_string(),
        count: n.max(0) as u64,
    };
    let at = Utc
        .timestamp_millis_opt(now_ms)
        .single()
        .unwrap_or_default();
    report.event(&AGENT_NAMESPACE, device, seq, at)
}
