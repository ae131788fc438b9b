//! Reading OTLP attributes: a record's own attributes first, then its resource's.
//!
//! Producers disagree on value types (Claude Code sends most numbers as strings, `success` as the
//! string `"true"`; SDKs send ints as ints, OTLP/JSON sends 64-bit ints as strings), so the readers
//! accept every spelling of the same value. A value of the wrong kind is an error naming the attribute,
//! never quoting the value: error texts end up in dead letters and logs.

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;

/// A record attribute that does not hold what its name promises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("attribute `{key}` should be {expected}")]
pub struct BadAttribute {
    pub key: String,
    pub expected: &'static str,
}

/// The attributes of one record, with its resource's behind them.
#[derive(Debug, Clone, Copy)]
pub struct Attrs<'a> {
    record: &'a [KeyValue],
    resource: &'a [KeyValue],
}

impl<'a> Attrs<'a> {
    pub fn new(record: &'a [KeyValue], resource: &'a [KeyValue]) -> Attrs<'a> {
        Attrs { record, resource }
    }

    /// The value of `key`: the record's own, else the resource's.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        find(self.record, key).or_else(|| find(self.resource, key))
    }

    /// The first of `keys` that is present (current name first, deprecated ones after).
    pub fn first(&self, keys: &[&'static str]) -> Option<(&'static str, &'a Value)> {
        keys.iter().find_map(|k| self.get(k).map(|v| (*k, v)))
    }

    /// A non-empty string (ints are written out: some producers number their ids).
    pub fn str(&self, key: &str) -> Option<String> {
        self.get(key).and_then(text)
    }

    /// A resource attribute only (`service.name`).
    pub fn resource_str(&self, key: &str) -> Option<String> {
        find(self.resource, key).and_then(text)
    }

    /// A non-negative integer from the first present of `keys`; absent is `Ok(None)`.
    pub fn count(&self, keys: &[&'static str]) -> Result<Option<u64>, BadAttribute> {
        match self.first(keys) {
            None => Ok(None),
            Some((key, v)) => count(v)
                .map(Some)
                .ok_or_else(|| bad(key, "a non-negative integer")),
        }
    }

    /// A finite number.
    pub fn number(&self, key: &'static str) -> Result<Option<f64>, BadAttribute> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => number(v).map(Some).ok_or_else(|| bad(key, "a number")),
        }
    }

    /// A boolean (`true`/`false`, also as strings).
    pub fn bool(&self, key: &'static str) -> Result<Option<bool>, BadAttribute> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::BoolValue(b)) => Ok(Some(*b)),
            Some(Value::StringValue(s)) if s == "true" => Ok(Some(true)),
            Some(Value::StringValue(s)) if s == "false" => Ok(Some(false)),
            Some(_) => Err(bad(key, "true or false")),
        }
    }

    /// The first string of a string or an array of strings (`gen_ai.response.finish_reasons`).
    pub fn first_str(&self, key: &str) -> Option<String> {
        match self.get(key)? {
            Value::ArrayValue(a) => a
                .values
                .iter()
                .find_map(|v| v.value.as_ref().and_then(text)),
            other => text(other),
        }
    }
}

fn find<'a>(kvs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    kvs.iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn bad(key: &str, expected: &'static str) -> BadAttribute {
    BadAttribute {
        key: key.to_string(),
        expected,
    }
}

/// A string value (or an integer written out); empty is absent.
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::StringValue(s) if !s.is_empty() => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        _ => None,
    }
}

/// A non-negative integer: an int, an integral double, or a string of digits.
pub fn count(v: &Value) -> Option<u64> {
    match v {
        Value::IntValue(i) => u64::try_from(*i).ok(),
        Value::DoubleValue(d) if d.is_finite() && *d >= 0.0 && d.fract() == 0.0 && *d < 1e18 => {
            Some(*d as u64)
        }
        Value::StringValue(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    }
}

/// A finite number: an int, a double, or a string holding one.
pub fn number(v: &Value) -> Option<f64> {
    let x = match v {
        Value::IntValue(i) => *i as f64,
        Value::DoubleValue(d) => *d,
        Value::StringValue(s) => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    x.is_finite().then_some(x)
}
