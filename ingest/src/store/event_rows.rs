//! The new events of a batch (or of a group of batches) as one `COPY … FROM STDIN` (see [`EventRows`]).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::intake::ReadyEvent;

/// The new events as `COPY … FROM STDIN` text rows (tab-separated, `\N` for NULL, see [`copy_field`]).
///
/// COPY rather than `INSERT … SELECT FROM unnest(…)`: the events insert was the largest statement of a
/// batch (median 16.5 ms of ≈ 50 ms of database time for 900 new events, ingest benchmark); COPY skips
/// building and unnesting twenty arrays. It runs inside the batch's (group's) transaction like the other steps, one `COPY` per group (its tenants included).
pub struct EventRows {
    /// `tenant_id` and `received_at`, the same for every row of one batch ([`EventRows::batch`]).
    prefix: String,
    text: String,
    count: usize,
}

/// A time as COPY text, in microseconds cut (not rounded) as a bound `timestamptz` is stored.
fn micros(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Appends one COPY text-format field: `\N` for NULL, else the value with backslash, tab, newline and
/// carriage return escaped; then the separator (tab, or newline after the last field).
fn copy_field(out: &mut String, v: Option<&str>, last: bool) {
    match v {
        None => out.push_str("\\N"),
        Some(v) => {
            for c in v.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\t' => out.push_str("\\t"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    c => out.push(c),
                }
            }
        }
    }
    out.push(if last { '\n' } else { '\t' });
}

impl EventRows {
    pub fn new(capacity: usize) -> EventRows {
        EventRows {
            prefix: String::new(),
            text: String::with_capacity(capacity * 512),
            count: 0,
        }
    }

    /// The rows pushed next belong to a batch of `tenant_id` received at `received_at`.
    pub fn batch(&mut self, tenant_id: Uuid, received_at: DateTime<Utc>) {
        self.prefix = format!("{}\t{}\t", tenant_id, micros(&received_at));
    }

    pub fn push(
        &mut self,
        e: &ReadyEvent,
        user: String,
        device: String,
        model: String,
        estimate: Option<i64>,
    ) {
        use std::fmt::Write;
        let ev = &e.event;
        let role = ev.agent_role.map(|r| match r {
            apiary_schema::AgentRole::Queen => "queen",
            apiary_schema::AgentRole::Worker => "worker",
        });
        let estimate = estimate.map(|n| n.to_string());
        let out = &mut self.text;
        out.push_str(&self.prefix);
        // Times and the id are written in formats that need no escaping. Times in microseconds, cut
        // (`micros`): the server would round finer digits, while a bound timestamp (the event's key in
        // `event_keys`, every other table) is cut — and a time rounded up across midnight would put the
        // event in the next day's partition while its key stays in the day retention drops with it.
        let _ = write!(
            out,
            "{}\t{}\t{}\t",
            micros(&e.effective_at),
            ev.event_id,
            micros(&ev.occurred_at),
        );
        let fields = [
            Some(ev.kind.as_str()),
            Some(ev.runtime.as_str()),
            Some(ev.native_type.as_str()),
            Some(ev.session_id.as_deref().unwrap_or("")),
            Some(ev.colony_id.as_deref().unwrap_or("")),
            ev.parent_session_id.as_deref(),
            ev.worker_id.as_deref(),
            role,
            ev.node_id.as_deref(),
            ev.execution_id.as_deref(),
            ev.trace_id.as_deref(),
            Some(user.as_str()),
            Some(device.as_str()),
            Some(model.as_str()),
            Some(e.data_json.as_str()),
            estimate.as_deref(),
        ];
        let n = fields.len();
        for (i, f) in fields.into_iter().enumerate() {
            copy_field(out, f, i + 1 == n);
        }
        self.count += 1;
    }

    pub async fn insert(
        self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    ) -> Result<(), sqlx::Error> {
        if self.count == 0 {
            return Ok(());
        }
        let mut copy = tx.copy_in_raw(COPY_EVENTS_SQL).await?;
        copy.send(self.text.into_bytes()).await?;
        copy.finish().await?;
        Ok(())
    }
}

const COPY_EVENTS_SQL: &str = "COPY events (tenant_id, received_at, effective_at, event_id, occurred_at, kind,
    runtime, native_type, session_id, colony_id, parent_session_id, worker_id, agent_role, node_id, execution_id,
    trace_id, user_id, device_id, model, data, cost_estimated_nanos) FROM STDIN";

#[cfg(test)]
mod tests {
    use super::{copy_field, micros};

    #[test]
    fn times_are_cut_to_microseconds_never_rounded_into_the_next_day() {
        let t = chrono::DateTime::parse_from_rfc3339("2026-11-26T23:59:59.9999996Z")
            .unwrap()
            .to_utc();
        assert_eq!(micros(&t), "2026-11-26T23:59:59.999999Z");
    }

    #[test]
    fn copy_fields_escape_what_the_text_format_would_misread() {
        let mut out = String::new();
        copy_field(&mut out, Some("a\tb\\c\nd\re"), false);
        copy_field(&mut out, None, false);
        copy_field(&mut out, Some(r#"{"k":"q\"uo\\te"}"#), true);
        assert_eq!(
            out,
            "a\\tb\\\\c\\nd\\re\t\\N\t{\"k\":\"q\\\\\"uo\\\\\\\\te\"}\n"
        );
    }
}
