//! The live stream behind `GET /v1/stream` (Server-Sent Events): status transitions, sessions' usage
//! totals and device liveness, as rows of `stream_events` written by the transactions that caused them
//! ([`crate::store::stream`]).
//!
//! ## Order and resume (why nothing is skipped)
//! A stream position is `(xid, id)`: `id` a bigserial, `xid` at least the writing transaction's id. A
//! reader delivers, in position order, only rows whose `xid` is below the xmin of its own snapshot.
//! Every transaction below that xmin has ended; every transaction that may still commit has an id at or
//! above it, and writes rows with `xid` at or above its own id. So once a position is delivered, no row
//! can later appear before it, and resuming after the last delivered position (`Last-Event-ID`, or
//! `?after=`) gives exactly the rows that followed. (Ordering by `id` alone would not: a transaction
//! holding id 10 can commit after one holding id 11.) The price: a row waits until every transaction
//! that started writing before its own has ended — about one batch's duration under load.
//!
//! The xmin is read in a statement of its own ([`head`]) and bound into the read that follows: an xmin
//! from an earlier snapshot is never above a later one, so the rule still holds, and on Citus both the
//! xmin and the writers' `pg_current_xact_id()` are the coordinator's (a function inside a query on a
//! distributed table would run on a worker, in another transaction-id space). There, a batch's
//! transaction commits in two phases (docs/scaling.md, "Citus"): its rows become visible on the worker
//! just *after* the coordinator's commit, so a head is used only once the transactions prepared on the
//! workers when it was read have finished ([`settle`]).
//!
//! ## Fan-out
//! One [`StreamHub`] per replica: one `LISTEN apiary_stream` connection and one reader task
//! ([`StreamHub::run_until_stopped`]) query new rows of every tenant after each notification (and every
//! second, or every 20 ms while committed rows are held back by an older transaction), and send each
//! on the `tokio::sync::broadcast` channels (of [`CAPACITY`] rows) of the readers that may see it: one
//! per tenant for tenant-wide readers, one per (tenant, user) for user-bound ones, made when a first
//! subscriber needs one and dropped when its last one leaves, so a subscriber is never woken for rows it
//! may not see. Each subscriber still checks what it sends and skips positions it already sent. A subscriber first reads its backlog from the
//! table (after subscribing, so nothing falls between the two); one that falls behind by more than the
//! channel holds (a slow client: its connection is not being read) loses nothing either — it reads the
//! missed rows from the table again. Memory per subscriber stays bounded (one page of rows), and no
//! subscriber can slow the reader or the others.
//!
//! ## Window
//! Rows are kept for [`crate::store::stream::RETENTION`] (24 hours). A resume from a position pruned
//! since, or from one this database never gave (ahead of its head), gets `event: reset` (reload the
//! state with the REST reads, then carry on) and continues from the head — as on the agent's stream.
//! Only a malformed position is refused (400).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::{broadcast, watch};
use uuid::Uuid;

use crate::store::stream::{self as writes, CHANNEL};

/// Rows a broadcast channel holds; a subscriber further behind reads from the table instead.
pub const CAPACITY: usize = 1024;

/// Whose rows a channel carries: a tenant's (tenant-wide readers) or one of its users'.
type ChannelKey = (Uuid, Option<String>);

/// Rows one read fetches.
pub const PAGE: i64 = 1000;

/// A position in the stream: `xid-id` on the wire (the SSE `id:`, `Last-Event-ID`, `?after=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub xid: i64,
    pub id: i64,
}

impl Cursor {
    /// Parses `xid-id` (two non-negative integers).
    pub fn parse(s: &str) -> Option<Cursor> {
        let (x, i) = s.trim().split_once('-')?;
        let ok = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !ok(x) || !ok(i) {
            return None;
        }
        Some(Cursor {
            xid: x.parse().ok()?,
            id: i.parse().ok()?,
        })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.xid, self.id)
    }
}

/// One stored stream row.
#[derive(Debug, Clone)]
pub struct StreamRow {
    pub tenant_id: Uuid,
    /// The owner of the session or device ('' for none): what a user-bound read token may see.
    pub user_id: String,
    pub at: Cursor,
    /// The event (`status`, `usage` or `device`) as Server-Sent Events text (`id`, `event`, `data`, blank line), encoded once and shared
    /// by every subscriber that sends it.
    pub sse: Bytes,
}

/// One event in the `text/event-stream` format.
pub fn encode(kind: &str, at: &str, data: &str) -> Bytes {
    // A data line cannot hold a line break (stored JSON has none; kept safe all the same).
    let data = if data.contains(['\n', '\r']) {
        data.replace("\r\n", "\n")
            .replace('\r', "\n")
            .replace('\n', "\ndata: ")
    } else {
        data.to_string()
    };
    Bytes::from(format!("id: {at}\nevent: {kind}\ndata: {data}\n\n"))
}

#[derive(sqlx::FromRow)]
pub(crate) struct RowSql {
    tenant_id: Uuid,
    xid: i64,
    id: i64,
    kind: String,
    user_id: String,
    data: String,
}

impl From<RowSql> for StreamRow {
    fn from(r: RowSql) -> StreamRow {
        let at = Cursor {
            xid: r.xid,
            id: r.id,
        };
        StreamRow {
            tenant_id: r.tenant_id,
            user_id: r.user_id,
            sse: encode(&r.kind, &at.to_string(), &r.data),
            at,
        }
    }
}

/// The columns of a [`RowSql`].
pub(crate) const ROW_COLUMNS: &str = "tenant_id, xid, id, kind, user_id, data::text AS data";

/// The deliverable rule (see the module notes), as SQL: `$1` is the xmin [`head`] read.
pub(crate) const DELIVERABLE: &str = "xid < $1";

/// The replica's stream reader and its subscribers' channel.
#[derive(Debug)]
pub struct StreamHub {
    /// The open channels: every new row a reader of that key may see, in stream order.
    channels: Mutex<HashMap<ChannelKey, broadcast::Sender<Arc<StreamRow>>>>,
    /// The open streams, counted (bounded by the limits).
    slots: Arc<Slots>,
    /// Set at shutdown: open streams end, so the server can drain.
    stopped: watch::Sender<bool>,
}

/// Open streams per tenant and in all, with their limits.
#[derive(Debug)]
struct Slots {
    max_total: usize,
    max_per_tenant: usize,
    open: Mutex<(usize, HashMap<Uuid, usize>)>,
}

/// A stream's place among the open ones; given back when dropped (the stream ended or its client left).
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    tenant: Uuid,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap();
        open.0 -= 1;
        if let Some(n) = open.1.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.tenant);
            }
        }
    }
}

/// Why a stream could not be opened: the replica's or the tenant's limit is reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamFull {
    #[error("this server has {0} live streams open, its limit (stream_max_subscribers); retry later or on another replica")]
    Server(usize),
    #[error("this tenant has {0} live streams open on this server, its limit (stream_max_per_tenant); close one or retry later")]
    Tenant(usize),
}

/// An open stream's channel and its slot.
#[derive(Debug)]
pub struct Subscription {
    pub rows: broadcast::Receiver<Arc<StreamRow>>,
    pub slot: Slot,
}

impl Default for StreamHub {
    fn default() -> Self {
        StreamHub::new(usize::MAX, usize::MAX)
    }
}

impl StreamHub {
    /// A hub that keeps at most `max_total` streams open, and `max_per_tenant` of one tenant.
    pub fn new(max_total: usize, max_per_tenant: usize) -> StreamHub {
        StreamHub {
            channels: Mutex::new(HashMap::new()),
            slots: Arc::new(Slots {
                max_total,
                max_per_tenant,
                open: Mutex::new((0, HashMap::new())),
            }),
            stopped: watch::channel(false).0,
        }
    }

    /// New rows of `tenant` (of `user` only, when set) from now on (subscribe before reading a backlog:
    /// see the module notes) — or [`StreamFull`] when a limit is reached.
    pub fn subscribe(&self, tenant: Uuid, user: Option<&str>) -> Result<Subscription, StreamFull> {
        let slot = {
            let mut open = self.slots.open.lock().unwrap();
            if open.0 >= self.slots.max_total {
                return Err(StreamFull::Server(open.0));
            }
            let mine = open.1.get(&tenant).copied().unwrap_or(0);
            if mine >= self.slots.max_per_tenant {
                return Err(StreamFull::Tenant(mine));
            }
            open.0 += 1;
            *open.1.entry(tenant).or_insert(0) += 1;
            Slot {
                slots: self.slots.clone(),
                tenant,
            }
        };
        let mut channels = self.channels.lock().unwrap();
        let rows = channels
            .entry((tenant, user.map(str::to_string)))
            .or_insert_with(|| broadcast::channel(CAPACITY).0)
            .subscribe();
        Ok(Subscription { rows, slot })
    }

    /// Resolves (true) when the server is stopping.
    pub fn stopped(&self) -> watch::Receiver<bool> {
        self.stopped.subscribe()
    }

    /// Ends every open stream.
    pub fn stop(&self) {
        self.stopped.send_replace(true);
    }

    /// How many streams are open on this replica.
    pub fn subscribers(&self) -> usize {
        let channels = self.channels.lock().unwrap();
        channels
            .values()
            .map(broadcast::Sender::receiver_count)
            .sum()
    }

    /// Sends new rows to the channels that may see them; drops the channels nobody reads any more.
    fn send(&self, rows: Vec<StreamRow>) {
        let mut channels = self.channels.lock().unwrap();
        channels.retain(|_, tx| tx.receiver_count() > 0);
        if channels.is_empty() {
            return;
        }
        for row in rows {
            let row = Arc::new(row);
            let keys = [
                (row.tenant_id, None),
                (row.tenant_id, Some(row.user_id.clone())),
            ];
            for key in &keys {
                if let Some(tx) = channels.get(key) {
                    // A subscriber that left meanwhile is not an error: the rows stay in the table.
                    let _ = tx.send(row.clone());
                }
            }
        }
    }

    /// Listens and broadcasts until [`StreamHub::stop`]; errors are logged and retried.
    pub async fn run_until_stopped(self: Arc<Self>, pool: PgPool) {
        let mut stopped = self.stopped();
        let mut listener = None;
        let mut after: Option<Cursor> = None;
        let mut idle_read = None;
        let mut wait = Duration::ZERO;
        loop {
            if listener.is_none() {
                listener = listen(&pool).await;
            }
            let lost = match listener.as_mut() {
                Some(l) => tokio::select! {
                    r = tokio::time::timeout(wait, l.recv()) => matches!(r, Ok(Err(_))),
                    _ = stopped.wait_for(|s| *s) => return,
                },
                None => tokio::select! {
                    _ = tokio::time::sleep(wait) => false,
                    _ = stopped.wait_for(|s| *s) => return,
                },
            };
            if lost {
                // Notifications may have been missed: read now, and listen again.
                listener = None;
            }
            match self.pump(&pool, &mut after, &mut idle_read).await {
                Ok(more) => wait = more,
                Err(e) => {
                    tracing::warn!(error = %e, "live stream: reading new rows failed; retrying");
                    listener = None;
                    wait = Duration::from_secs(1);
                }
            }
        }
    }

    /// Broadcasts the deliverable rows after `after` (the head, the first time); returns how long to
    /// wait for the next notification before reading again.
    async fn pump(
        &self,
        pool: &PgPool,
        after: &mut Option<Cursor>,
        idle_read: &mut Option<std::time::Instant>,
    ) -> Result<Duration, sqlx::Error> {
        // Nobody subscribed: read no rows, move the cursor to the head. The head is read *before*
        // looking: a subscriber that subscribes after the look reads its backlog up to a head at or
        // past this one (an xmin never goes back), so the rows the hub sends from here on overlap its
        // backlog (it skips positions it sent) and none falls between; one that subscribed before the
        // look is seen. Under a fleet's load, most notifications find no dashboard open.
        //
        // While nobody is subscribed the head is read at most every [`IDLE_HEAD_EVERY`]: a cursor
        // older than the head only makes the first rows sent to a new subscriber overlap its backlog
        // more (it skips them), while a head read on every notification was one statement per group
        // commit per replica (fleet bench: 0.25 statements per small batch).
        let idle = self.subscribers() == 0;
        if idle && after.is_some() && idle_read.is_some_and(|t| t.elapsed() < IDLE_HEAD_EVERY) {
            return Ok(Duration::from_secs(1));
        }
        let (now, citus) = xmin(pool).await?;
        if self.subscribers() == 0 {
            *after = Some(after.map_or(now, |a| a.max(now)));
            *idle_read = Some(std::time::Instant::now());
            return Ok(Duration::from_secs(1));
        }
        // A subscriber's own reads use settled heads, so the idle path above needs none.
        if citus {
            settle(pool).await?;
        }
        let mut at = after.unwrap_or(now);
        *after = Some(at);
        let mut below = Some(now);
        loop {
            let below = match below.take() {
                Some(b) => b,
                None => head(pool).await?,
            };
            let rows: Vec<RowSql> = sqlx::query_as(&format!(
                "SELECT {ROW_COLUMNS} FROM stream_events WHERE (xid, id) > ($2, $3) AND {DELIVERABLE}
                 ORDER BY xid, id LIMIT $4"
            ))
            .bind(below.xid)
            .bind(at.xid)
            .bind(at.id)
            .bind(PAGE)
            .fetch_all(pool)
            .await?;
            let full = rows.len() as i64 == PAGE;
            let rows: Vec<StreamRow> = rows.into_iter().map(StreamRow::from).collect();
            if let Some(last) = rows.last() {
                at = last.at;
            }
            self.send(rows);
            *after = Some(at);
            if !full {
                break;
            }
        }
        // Committed rows not deliverable yet (an older transaction is still open): look again soon.
        let held: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM stream_events WHERE (xid, id) > ($1, $2))",
        )
        .bind(at.xid)
        .bind(at.id)
        .fetch_one(pool)
        .await?;
        Ok(if held {
            Duration::from_millis(20)
        } else {
            Duration::from_secs(1)
        })
    }
}

async fn listen(pool: &PgPool) -> Option<PgListener> {
    let attempt = async {
        let mut l = PgListener::connect_with(pool).await?;
        l.listen(CHANNEL).await?;
        Ok::<_, sqlx::Error>(l)
    };
    match attempt.await {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(error = %e, "live stream: cannot LISTEN; polling every second");
            None
        }
    }
}

/// The current head: every row before it is deliverable now, every row after it is not yet. On Citus,
/// also waits until the two-phase commits that could hide rows below it have finished ([`settle`]).
pub(crate) async fn head(pool: &PgPool) -> Result<Cursor, sqlx::Error> {
    let (head, citus) = xmin(pool).await?;
    if citus {
        settle(pool).await?;
    }
    Ok(head)
}

/// The xmin of a fresh snapshot as a head (not yet settled on Citus), and whether the database is a
/// Citus coordinator (same statement: one round trip).
async fn xmin(pool: &PgPool) -> Result<(Cursor, bool), sqlx::Error> {
    let (xmin, citus): (i64, bool) = sqlx::query_as(
        "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
    )
    .fetch_one(pool)
    .await?;
    Ok((Cursor { xid: xmin, id: 0 }, citus))
}

/// How often the hub reads the head while nobody is subscribed (see [`StreamHub::pump`]).
const IDLE_HEAD_EVERY: Duration = Duration::from_secs(1);

/// How long [`settle`] waits for a two-phase commit to finish before giving up on this read.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// Citus only, called after the head's snapshot was taken: waits until every transaction prepared on a
/// worker at this moment (this database's) has been committed or rolled back there.
///
/// Why: Citus commits a batch's transaction in two phases (even on one worker; see docs/scaling.md,
/// "Two-phase commit and the live stream") — `PREPARE TRANSACTION` on the worker, the coordinator's own commit, then `COMMIT PREPARED`
/// on the worker. In between, the coordinator's transaction has ended, so the head's xmin passes it, but
/// its rows are not visible on the worker yet; a reader that moved past them would never deliver them.
/// Every such transaction below the head prepared before the head's snapshot, so it is among those
/// prepared now (or already done): once they are all gone, every transaction below the head is visible
/// everywhere. Transactions that prepare later are not waited for. A prepared transaction that stays
/// (its coordinator failed mid-commit: Citus' recovery resolves it, by default within a minute) makes
/// this read fail after [`SETTLE_LIMIT`] instead of skipping rows; the reader retries.
async fn settle(pool: &PgPool) -> Result<(), sqlx::Error> {
    let open = prepared(pool).await?;
    if open.is_empty() {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        tokio::time::sleep(pause).await;
        let now = prepared(pool).await?;
        if !open.iter().any(|gid| now.contains(gid)) {
            return Ok(());
        }
        if started.elapsed() > SETTLE_LIMIT {
            return Err(sqlx::Error::Protocol(format!(
                "live stream: {} two-phase commit(s) on the workers still open after {SETTLE_LIMIT:?} \
                 (Citus recovers them); not reading past them",
                open.iter().filter(|gid| now.contains(*gid)).count()
            )));
        }
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The transactions prepared on the workers in this database, by global id.
async fn prepared(pool: &PgPool) -> Result<std::collections::HashSet<String>, sqlx::Error> {
    let answers: Vec<(String, i32, bool, String)> = sqlx::query_as(
        "SELECT nodename::text, nodeport, success, result FROM run_command_on_workers(
             $$SELECT coalesce(string_agg(gid, ' '), '') FROM pg_prepared_xacts
               WHERE database = current_database()$$)",
    )
    .fetch_all(pool)
    .await?;
    let mut gids = std::collections::HashSet::new();
    for (node, port, success, result) in answers {
        if !success {
            return Err(sqlx::Error::Protocol(format!(
                "live stream: reading the prepared transactions of worker {node}:{port}: {result}"
            )));
        }
        gids.extend(
            result
                .split_whitespace()
                .map(|gid| format!("{node}:{port}/{gid}")),
        );
    }
    Ok(gids)
}

/// The stream's upkeep, on every replica until `stopped`: due usage every 250 ms, offline devices every
/// 5 s, pruning every 10 minutes.
pub async fn run_upkeep(pool: PgPool, offline_after_secs: i64, mut stopped: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
        if let Err(e) = writes::flush_usage(&pool).await {
            tracing::warn!(error = %e, "live stream: flushing due usage failed");
        }
        if n.is_multiple_of(20) {
            if let Err(e) = writes::sweep_devices(&pool, offline_after_secs).await {
                tracing::warn!(error = %e, "live stream: offline sweep failed");
            }
        }
        if n.is_multiple_of(2400) {
            let cutoff = chrono::Utc::now() - writes::RETENTION;
            if let Err(e) = writes::prune(&pool, cutoff).await {
                tracing::warn!(error = %e, "live stream: pruning failed");
            }
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_what_they_write_and_refuse_anything_else() {
        let c = Cursor { xid: 812, id: 40 };
        assert_eq!(Cursor::parse(&c.to_string()), Some(c));
        for bad in [
            "",
            "1",
            "1-",
            "-1",
            "a-1",
            "1-2-3",
            "1 -2",
            "+1-2",
            "99999999999999999999-1",
        ] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
        assert!(Cursor { xid: 9, id: 100 } < Cursor { xid: 10, id: 1 });
    }

    /// Limits of 4 streams on the server and 2 per tenant: a tenant's third is refused while another
    /// tenant still gets one, a closed stream gives its place back to its tenant (once), and when every
    /// stream is closed nothing is counted any more.
    #[test]
    fn open_streams_are_counted_per_tenant_and_in_all_and_a_closed_one_frees_its_place() {
        let hub = StreamHub::new(4, 2);
        let (acme, globex, initech) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let a1 = hub.subscribe(acme, None).unwrap();
        let a2 = hub.subscribe(acme, Some("alice")).unwrap();
        assert_eq!(
            hub.subscribe(acme, None).unwrap_err(),
            StreamFull::Tenant(2)
        );
        let g1 = hub.subscribe(globex, None).unwrap();
        assert_eq!(hub.subscribers(), 3);
        drop(a1);
        let a3 = hub.subscribe(acme, None).unwrap();
        assert_eq!(
            hub.subscribe(acme, None).unwrap_err(),
            StreamFull::Tenant(2),
            "one closed stream frees one place"
        );
        let g2 = hub.subscribe(globex, Some("bob")).unwrap();
        assert_eq!(
            hub.subscribe(initech, None).unwrap_err(),
            StreamFull::Server(4)
        );
        assert_eq!(hub.subscribers(), 4);
        drop((a2, a3, g1, g2));
        assert_eq!(hub.subscribers(), 0);
        assert_eq!(*hub.slots.open.lock().unwrap(), (0, HashMap::new()));
    }

    fn row(tenant: Uuid, user: &str, id: i64) -> StreamRow {
        let at = Cursor { xid: 7, id };
        StreamRow {
            tenant_id: tenant,
            user_id: user.into(),
            at,
            sse: encode("status", &at.to_string(), "{}"),
        }
    }

    /// The hub sends a row to its tenant's tenant-wide subscribers and to its user's own, to no one
    /// else; a channel whose subscribers all left is dropped at the next rows.
    #[test]
    fn rows_reach_their_tenant_and_their_user_only() {
        let hub = StreamHub::default();
        let (acme, globex) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut all = hub.subscribe(acme, None).unwrap();
        let mut alice = hub.subscribe(acme, Some("alice")).unwrap();
        let mut bob = hub.subscribe(acme, Some("bob")).unwrap();
        let mut other = hub.subscribe(globex, None).unwrap();
        hub.send(vec![
            row(acme, "alice", 1),
            row(acme, "", 2),
            row(globex, "alice", 3),
        ]);
        let ids = |s: &mut Subscription| {
            std::iter::from_fn(|| s.rows.try_recv().ok())
                .map(|r| r.at.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&mut all), [1, 2]);
        assert_eq!(ids(&mut alice), [1]);
        assert_eq!(ids(&mut bob), Vec::<i64>::new());
        assert_eq!(ids(&mut other), [3]);
        drop((all, alice, bob));
        hub.send(vec![]);
        let open: Vec<ChannelKey> = hub.channels.lock().unwrap().keys().cloned().collect();
        assert_eq!(
            open,
            [(globex, None)],
            "the channels nobody reads are dropped"
        );
        drop(other);
    }
}
