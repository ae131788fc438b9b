//! Value types of the read routes' query strings. Each parses its own text (`FromStr`, the message says
//! what is wrong) and [`parsed`] plugs it into serde, so a parameter struct is a plain
//! `#[derive(Deserialize)]` and the extractor names the parameter that failed.

use std::str::FromStr;

use apiary_schema::status::Status;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer};

/// Deserializes a query-string value through its `FromStr` into `Some` (use with `#[serde(default)]`).
pub fn parsed<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr<Err = String>,
{
    let text = String::deserialize(d)?;
    text.parse().map(Some).map_err(serde::de::Error::custom)
}

/// An id or name filter: 1 to 200 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text(pub String);

impl FromStr for Text {
    type Err = String;

    fn from_str(s: &str) -> Result<Text, String> {
        if s.is_empty() || s.len() > 200 {
            return Err("must have 1 to 200 characters".into());
        }
        Ok(Text(s.to_string()))
    }
}

/// An RFC 3339 time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rfc3339(pub DateTime<Utc>);

impl FromStr for Rfc3339 {
    type Err = String;

    fn from_str(s: &str) -> Result<Rfc3339, String> {
        DateTime::parse_from_rfc3339(s)
            .map(|t| Rfc3339(t.with_timezone(&Utc)))
            .map_err(|_| "must be an RFC 3339 time".into())
    }
}

/// A page size from 1 to `MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit<const MAX: usize>(pub usize);

impl<const MAX: usize> FromStr for Limit<MAX> {
    type Err = String;

    fn from_str(s: &str) -> Result<Limit<MAX>, String> {
        s.parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX).contains(n))
            .map(Limit)
            .ok_or_else(|| format!("must be a whole number from 1 to {MAX}"))
    }
}

/// A comma-separated list of statuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statuses(pub Vec<Status>);

impl FromStr for Statuses {
    type Err = String;

    fn from_str(s: &str) -> Result<Statuses, String> {
        s.split(',')
            .map(|s| Status::parse(s.trim()))
            .collect::<Option<Vec<_>>>()
            .map(Statuses)
            .ok_or_else(|| format!("use any of {}", crate::status::all_names()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_type_says_what_is_wrong() {
        assert_eq!(
            Text::from_str("").unwrap_err(),
            "must have 1 to 200 characters"
        );
        assert!(Text::from_str(&"x".repeat(201)).is_err());
        assert_eq!(Limit::<1000>::from_str("1000"), Ok(Limit(1000)));
        assert_eq!(
            Limit::<1000>::from_str("0").unwrap_err(),
            "must be a whole number from 1 to 1000"
        );
        assert!(Rfc3339::from_str("yesterday").is_err());
        assert_eq!(
            Statuses::from_str("completed, stalled").unwrap().0,
            [Status::Completed, Status::Stalled]
        );
        assert!(Statuses::from_str("busy")
            .unwrap_err()
            .contains("needs_attention"));
    }
}
