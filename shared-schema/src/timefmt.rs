//! UTC times as RFC 3339 text, byte for byte what chrono's own `Serialize` writes (seconds fraction
//! `AutoSi`: none, 3, 6 or 9 digits, whichever is exact; `Z`), without going through `core::fmt`.
//!
//! The health trackers and work folds the agent stores per session are mostly times: a tracker holds
//! up to 32 pending inputs and their transitions, and it is serialised again at every commit that
//! touches its session. Through chrono's `Display` (`write_rfc3339`) the times took a tenth of the
//! agent's writer thread in a profile of a backfill of interleaved sessions. Used with
//! `#[serde(serialize_with = ...)]`; deserialisation stays chrono's (it reads what this writes).

use chrono::{DateTime, Datelike, Timelike, Utc};
use serde::ser::SerializeTuple;
use serde::Serializer;
use uuid::Uuid;

/// The longest text [`format`] writes: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
const MAX_LEN: usize = 30;

/// Writes `t` into `buf`; returns the length, or None for a year outside 0000–9999 (chrono writes
/// those with a sign, left to it).
fn format(t: &DateTime<Utc>, buf: &mut [u8; MAX_LEN]) -> Option<usize> {
    let year = t.year();
    if !(0..=9999).contains(&year) {
        return None;
    }
    let two = |buf: &mut [u8; MAX_LEN], at: usize, v: u32| {
        buf[at] = b'0' + (v / 10) as u8;
        buf[at + 1] = b'0' + (v % 10) as u8;
    };
    let year = year as u32;
    two(buf, 0, year / 100);
    two(buf, 2, year % 100);
    buf[4] = b'-';
    two(buf, 5, t.month());
    buf[7] = b'-';
    two(buf, 8, t.day());
    buf[10] = b'T';
    // A leap second is second 59 with nanoseconds past 1e9: written as second 60, as chrono does.
    let (mut sec, mut nano) = (t.second(), t.nanosecond());
    if nano >= 1_000_000_000 {
        sec += 1;
        nano -= 1_000_000_000;
    }
    two(buf, 11, t.hour());
    buf[13] = b':';
    two(buf, 14, t.minute());
    buf[16] = b':';
    two(buf, 17, sec);
    let mut len = 19;
    let (digits, mut frac) = if nano == 0 {
        (0, 0)
    } else if nano % 1_000_000 == 0 {
        (3, nano / 1_000_000)
    } else if nano % 1_000 == 0 {
        (6, nano / 1_000)
    } else {
        (9, nano)
    };
    if digits > 0 {
        buf[len] = b'.';
        for i in (0..digits).rev() {
            buf[len + 1 + i] = b'0' + (frac % 10) as u8;
            frac /= 10;
        }
        len += 1 + digits;
    }
    buf[len] = b'Z';
    Some(len + 1)
}

/// `#[serde(serialize_with = "crate::timefmt::time")]` for a `DateTime<Utc>`.
pub fn time<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    if !s.is_human_readable() {
        return serde::Serialize::serialize(t, s);
    }
    let mut buf = [0u8; MAX_LEN];
    match format(t, &mut buf) {
        // Only ASCII digits and separators were written.
        Some(n) => s.serialize_str(std::str::from_utf8(&buf[..n]).unwrap_or_default()),
        None => serde::Serialize::serialize(t, s),
    }
}

/// The same for an `Option<DateTime<Utc>>`.
pub fn opt_time<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_some(&Time(t)),
        None => s.serialize_none(),
    }
}

/// The same for an `Option<(DateTime<Utc>, Uuid)>` (a fold's last key).
pub fn opt_key<S: Serializer>(k: &Option<(DateTime<Utc>, Uuid)>, s: S) -> Result<S::Ok, S::Error> {
    match k {
        Some(k) => s.serialize_some(&Key(k)),
        None => s.serialize_none(),
    }
}

struct Time<'a>(&'a DateTime<Utc>);

impl serde::Serialize for Time<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        time(self.0, s)
    }
}

struct Key<'a>(&'a (DateTime<Utc>, Uuid));

impl serde::Serialize for Key<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(2)?;
        t.serialize_element(&Time(&self.0 .0))?;
        t.serialize_element(&self.0 .1)?;
        t.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone};
    use proptest::prelude::*;

    fn ours(t: &DateTime<Utc>) -> String {
        let mut out = Vec::new();
        time(t, &mut serde_json::Serializer::new(&mut out)).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, nano: u32) -> DateTime<Utc> {
        let naive = NaiveDate::from_ymd_opt(y, mo, d)
            .unwrap()
            .and_hms_nano_opt(h, mi, s, nano)
            .unwrap();
        Utc.from_utc_datetime(&naive)
    }

    #[test]
    fn edge_times_read_as_chrono_writes_them() {
        for t in [
            at(2026, 11, 14, 11, 50, 52, 735_757_000),
            at(2026, 1, 1, 0, 0, 0, 0),
            at(2026, 1, 1, 0, 0, 0, 1),
            at(2026, 1, 1, 0, 0, 0, 120_000_000),
            at(2026, 1, 1, 0, 0, 0, 999_999_999),
            at(2016, 12, 31, 23, 59, 59, 1_000_000_000),
            at(2016, 12, 31, 23, 59, 59, 1_500_000_000),
            at(2016, 12, 31, 23, 59, 59, 1_000_000_007),
            at(0, 1, 1, 0, 0, 0, 0),
            at(9999, 12, 31, 23, 59, 59, 999_999_000),
            at(10_000, 1, 1, 0, 0, 0, 0),
            at(-1, 6, 30, 12, 0, 0, 5_000),
        ] {
            assert_eq!(ours(&t), serde_json::to_string(&t).unwrap(), "{t:?}");
        }
    }

    #[test]
    fn options_and_keys_read_as_chrono_writes_them() {
        #[derive(serde::Serialize)]
        struct Ours {
            #[serde(serialize_with = "opt_time")]
            a: Option<DateTime<Utc>>,
            #[serde(serialize_with = "opt_time")]
            b: Option<DateTime<Utc>>,
            #[serde(serialize_with = "opt_key")]
            k: Option<(DateTime<Utc>, Uuid)>,
            #[serde(serialize_with = "opt_key")]
            none: Option<(DateTime<Utc>, Uuid)>,
        }
        #[derive(serde::Serialize)]
        struct Chrono {
            a: Option<DateTime<Utc>>,
            b: Option<DateTime<Utc>>,
            k: Option<(DateTime<Utc>, Uuid)>,
            none: Option<(DateTime<Utc>, Uuid)>,
        }
        let t = at(2026, 11, 3, 10, 0, 0, 250_000_000);
        let id = Uuid::from_u128(0xfeed);
        assert_eq!(
            serde_json::to_string(&Ours {
                a: Some(t),
                b: None,
                k: Some((t, id)),
                none: None
            })
            .unwrap(),
            serde_json::to_string(&Chrono {
                a: Some(t),
                b: None,
                k: Some((t, id)),
                none: None
            })
            .unwrap()
        );
    }

    proptest! {
        #[test]
        fn any_time_reads_as_chrono_writes_it(
            secs in -62_167_219_200i64..253_402_300_800i64,
            nano in prop_oneof![
                Just(0u32),
                (0u32..1000).prop_map(|ms| ms * 1_000_000),
                (0u32..1_000_000).prop_map(|us| us * 1_000),
                0u32..1_000_000_000,
            ],
        ) {
            let t = DateTime::from_timestamp(secs, nano).unwrap();
            prop_assert_eq!(ours(&t), serde_json::to_string(&t).unwrap());
        }
    }
}
