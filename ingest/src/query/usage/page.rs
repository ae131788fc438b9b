//! An answer of bounded size, whole or in keyset pages.
//!
//! ## Why
//! The answer's size is set by the question, not by the data kept: a year by day per user is a row per
//! user and day (120,000 rows, 58 MB of JSON for a 1,000-user organisation), per user and tool several
//! times that. Built whole, such an answer held hundreds of megabytes in the server for seconds, and a
//! few at once could take a replica's memory. So an answer is at most [`MAX_ROWS`] rows: a larger one is
//! refused (422 `too_many_rows`, saying how to ask instead) after reading at most one row past the
//! bound, or asked for in pages (`limit`, then `cursor`).
//!
//! ## Pages
//! The rows are sorted by bucket, then by their group keys; a page is the next `limit` of them after
//! the cursor, which names the last row returned (its bucket and keys). A page reads windows of whole
//! buckets from the cursor's bucket on — one bucket first, then as many as the rows per bucket seen so
//! far say the rest of the page needs — so the first page of a year by day per user reads a few weeks,
//! not the year. Every window is the same query over a shorter range starting on one of the full
//! range's bucket starts, so its buckets and rows are the full answer's (the bucket of a window's
//! first instant has the same label as in the full range; see [`crate::query::buckets`]). A window past
//! [`MAX_ROWS`] grouped rows is read again smaller; a single bucket past it is refused (ask with a finer
//! granularity). With `granularity=total` there is one bucket: the rows are read whole (at most
//! [`MAX_ROWS`]) and cut.
//!
//! `totals` are always the whole range's: read once more, grouped by nothing (by tenant for an
//! operator, by tool for tool rows), when the answer does not fit in one page.

use chrono::{DateTime, Utc};

use super::fetch::{self, UsageRow};
use super::plan::{unit, Filter};
use super::{Dim, Granularity, UsageQuery, UsageResponse, Within};
use crate::error::ApiError;
use crate::query::buckets;
use crate::query::ReadDb;
use crate::rollups::Usage;

/// The most rows an answer (or a page) may have.
pub const MAX_ROWS: usize = 100_000;

/// Where a page ended: the last row's bucket (its label; None for totals) and group keys, and which
/// question it is a page of ([`question_digest`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub bucket: Option<DateTime<Utc>>,
    pub keys: Vec<String>,
    /// [`question_digest`] of the question the page answered.
    pub query: String,
}

/// The question a client asked, hashed (8 bytes of SHA-256, in hex): its `from`, `to`, `tz`,
/// `granularity` and `group_by` as sent (a default is the same absence on every page, so a `to` left
/// to its default — the clock's next quarter hour — does not make the next page another question). A
/// cursor is only read with the question it was a page of: another range or grouping would skip or
/// repeat rows.
pub fn question_digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(text.as_bytes())[..8])
}

impl Cursor {
    /// Opaque to clients: the query's digest, a dot, the bucket in Unix microseconds (`t` for totals), a
    /// dot, the keys as a JSON array in hex (any text, URL- and header-safe).
    pub fn encode(&self) -> String {
        let at = self
            .bucket
            .map_or_else(|| "t".to_string(), |b| b.timestamp_micros().to_string());
        let keys = serde_json::to_string(&self.keys).expect("strings serialise");
        format!("{}.{at}.{}", self.query, hex::encode(keys))
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let mut parts = s.splitn(3, '.');
        let (query, at, keys) = (parts.next()?, parts.next()?, parts.next()?);
        if query.len() != 16 || !query.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let bucket = match at {
            "t" => None,
            micros => Some(DateTime::from_timestamp_micros(micros.parse().ok()?)?),
        };
        let keys: Vec<String> = serde_json::from_slice(&hex::decode(keys).ok()?).ok()?;
        (keys.len() <= Dim::ALL.len() && keys.iter().all(|k| k.len() <= 1024)).then(|| Cursor {
            bucket,
            keys,
            query: query.to_string(),
        })
    }

    fn of(question: &str, r: &UsageRow) -> Cursor {
        Cursor {
            bucket: r.bucket,
            keys: r.keys.clone(),
            query: question.to_string(),
        }
    }

    /// `r` sorts after this cursor's row.
    fn before(&self, r: &UsageRow) -> bool {
        (self.bucket, &self.keys) < (r.bucket, &r.keys)
    }
}

impl std::str::FromStr for Cursor {
    type Err = String;

    fn from_str(s: &str) -> Result<Cursor, String> {
        Cursor::decode(s).ok_or_else(|| "is not a cursor this endpoint returned".into())
    }
}

/// A page asked for: its size, where the previous one ended, and the question's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paging {
    pub limit: usize,
    pub after: Option<Cursor>,
    /// [`question_digest`] of the parameters as sent.
    pub question: String,
}

/// The answer to `q`: whole (`paging` None; refused past [`MAX_ROWS`] rows) or the page asked for, with
/// `next_cursor` set.
pub async fn answer(
    db: &ReadDb,
    within: Within<'_>,
    q: &UsageQuery,
    paging: Option<&Paging>,
) -> Result<UsageResponse, ApiError> {
    let Some(p) = paging else {
        let rows = fetch::run_at_most(db, within, q, Some(MAX_ROWS))
            .await?
            .ok_or_else(too_many)?;
        return Ok(UsageResponse::new(q, &rows));
    };
    if let Some(c) = &p.after {
        if c.query != p.question
            || c.keys.len() != q.group_by.len()
            || c.bucket.is_none() != (q.granularity == Granularity::Total)
        {
            return Err(ApiError::bad_param(
                "cursor",
                "is a page of another question: send the same `from`, `to`, `tz`, `granularity` and \
                 `group_by` as for the first page",
            ));
        }
    }
    let mut whole_totals = None;
    let (mut rows, more) = match unit(q.granularity) {
        None => {
            let rows = fetch::run_at_most(db, within, q, Some(MAX_ROWS))
                .await?
                .ok_or_else(|| ApiError::Unprocessable {
                    code: "too_many_rows",
                    message: format!(
                        "a `granularity=total` answer is cut into pages from at most {MAX_ROWS} rows: ask \
                         by hour, day or month, or with fewer dimensions"
                    ),
                })?;
            // Every row is here: the totals are theirs.
            let mut sum = Usage::default();
            for r in &rows {
                sum.add(&r.usage);
            }
            whole_totals = Some(super::UsageSums::from(&sum));
            let after = p.after.as_ref();
            let rows: Vec<UsageRow> = rows
                .into_iter()
                .filter(|r| after.is_none_or(|c| c.before(r)))
                .take(p.limit + 1)
                .collect();
            let more = rows.len() > p.limit;
            (rows, more)
        }
        Some(u) => windows(db, within, q, u, p).await?,
    };
    let next = more.then(|| {
        rows.truncate(p.limit);
        rows.last().map(|r| Cursor::of(&p.question, r))
    });
    let mut answer = UsageResponse::new(q, &rows);
    if let Some(t) = whole_totals {
        answer.totals = t;
    } else if more || p.after.is_some() {
        answer.totals = totals(db, within, q).await?;
    }
    answer.next_cursor = Some(next.flatten().map(|c| c.encode()));
    Ok(answer)
}

/// 422: the answer (or, with `granularity=total`, a page's rows to cut from) is past the bound.
fn too_many() -> ApiError {
    ApiError::Unprocessable {
        code: "too_many_rows",
        message: format!(
            "the answer has more than {MAX_ROWS} rows: ask for it in pages (`limit`, then `cursor` = the \
             answer's `next_cursor`), or with a coarser granularity, fewer dimensions or a shorter range"
        ),
    }
}

/// Up to `p.limit + 1` rows after the cursor, read in windows of whole buckets; true when there are
/// more than `p.limit`.
async fn windows(
    db: &ReadDb,
    within: Within<'_>,
    q: &UsageQuery,
    u: buckets::Unit,
    p: &Paging,
) -> Result<(Vec<UsageRow>, bool), ApiError> {
    let filter = Filter::of(within, &q.group_by)?;
    let Some((from, to)) = fetch::range(db, &filter, q).await? else {
        return Ok((vec![], false));
    };
    let b = buckets::buckets(u, q.tz, from, to);
    let n = b.starts.len();
    // The cursor's bucket (or, were it gone from the range, the first after it).
    let mut i = match p.after.as_ref().and_then(|c| c.bucket) {
        Some(at) => b.labels.partition_point(|l| *l < at),
        None => 0,
    };
    let want = p.limit + 1;
    let mut out: Vec<UsageRow> = Vec::new();
    // `w`: the next window's buckets; `read`, `seen`: the buckets read so far and their rows (those
    // before the cursor too, which are the density as much as the others).
    let (mut w, mut read, mut seen) = (1usize, 0usize, 0usize);
    while i < n && out.len() < want {
        let j = i.saturating_add(w).min(n);
        let window = UsageQuery {
            from: b.starts[i],
            to: if j == n { to } else { b.starts[j] },
            ..q.clone()
        };
        let Some(rows) = fetch::run_at_most(db, within, &window, Some(MAX_ROWS)).await? else {
            if j - i == 1 {
                return Err(ApiError::Unprocessable {
                    code: "too_many_rows",
                    message: format!(
                        "a bucket of the answer has more than {MAX_ROWS} rows: ask with a finer \
                         granularity or fewer dimensions"
                    ),
                });
            }
            w = ((j - i) / 4).max(1);
            continue;
        };
        let after = p.after.as_ref();
        seen += rows.len();
        out.extend(
            rows.into_iter()
                .filter(|r| after.is_none_or(|c| c.before(r))),
        );
        read += j - i;
        // The rows a bucket held so far tell how many buckets the rest of the page needs (a fifth more,
        // so one more window is rare); none yet, twice as many as this window.
        w = if seen == 0 {
            (j - i).saturating_mul(2)
        } else {
            // Within nine tenths of the bound at that density, so a large `limit` does not ask for a
            // window the bound refuses (the database would group it for nothing).
            let per_bucket = seen as f64 / read as f64;
            let needed = (want - out.len().min(want)) as f64 / per_bucket * 1.2;
            needed.min(MAX_ROWS as f64 * 0.9 / per_bucket).ceil() as usize
        }
        .clamp(1, (j - i).saturating_mul(64));
        i = j;
    }
    let more = out.len() > p.limit;
    out.truncate(want);
    Ok((out, more))
}

/// The whole range's totals: the same usage grouped by nothing (by tenant for an operator, whose reads
/// must be; by tool for tool rows, which are read from their own rollups).
async fn totals(
    db: &ReadDb,
    within: Within<'_>,
    q: &UsageQuery,
) -> Result<super::UsageSums, ApiError> {
    let whole = UsageQuery {
        group_by: q
            .group_by
            .iter()
            .copied()
            .filter(|d| matches!(d, Dim::Tenant | Dim::Tool))
            .collect(),
        granularity: Granularity::Total,
        ..q.clone()
    };
    let rows = fetch::run_at_most(db, within, &whole, Some(MAX_ROWS))
        .await?
        .ok_or_else(too_many)?;
    let mut sum = Usage::default();
    for r in &rows {
        sum.add(&r.usage);
    }
    Ok(super::UsageSums::from(&sum))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_what_they_write_and_refuse_anything_else() {
        let t = "2026-11-01T05:00:00Z".parse::<DateTime<Utc>>().unwrap();
        for c in [
            Cursor {
                bucket: Some(t),
                keys: vec!["user.7".into(), "".into(), "a \"model\", é/?&=".into()],
                query: "0123456789abcdef".into(),
            },
            Cursor {
                bucket: None,
                keys: vec![],
                query: "fedcba9876543210".into(),
            },
        ] {
            let s = c.encode();
            assert!(
                s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'),
                "{s}"
            );
            assert_eq!(Cursor::decode(&s), Some(c));
        }
        for bad in [
            "",
            "x",
            "12",
            "12.zz",
            "t.5b",
            "t.7b7d",
            "99999999999999999999.5b5d",
        ] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
        let long = serde_json::to_string(&vec!["k"; 9]).unwrap();
        assert_eq!(Cursor::decode(&format!("t.{}", hex::encode(long))), None);
    }

    #[test]
    fn a_cursor_is_before_the_rows_that_sort_after_it() {
        let t = |s: &str| Some(s.parse::<DateTime<Utc>>().unwrap());
        let row = |b, k: &str| UsageRow {
            bucket: b,
            keys: vec![k.into()],
            usage: Usage::default(),
            tool: None,
        };
        let c = Cursor {
            bucket: t("2026-11-02T00:00:00Z"),
            keys: vec!["m".into()],
            query: String::new(),
        };
        assert!(!c.before(&row(t("2026-11-01T00:00:00Z"), "z")));
        assert!(!c.before(&row(t("2026-11-02T00:00:00Z"), "a")));
        assert!(!c.before(&row(t("2026-11-02T00:00:00Z"), "m")));
        assert!(c.before(&row(t("2026-11-02T00:00:00Z"), "n")));
        assert!(c.before(&row(t("2026-11-03T00:00:00Z"), "")));
    }
}
