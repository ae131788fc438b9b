//! A native Hive line read in one pass, keeping only what can leave the device.
//!
//! [`process_value`](crate::process_value) builds the whole line as a JSON value — the prompt, the tool's
//! arguments and result, the summary — then adapts it, then lets the policy drop most of it. Here the
//! line is read once, with borrowed strings: the envelope's fields are taken as they are read, and of
//! `data` only the keys the event's kind can use are built as values (the *plan*: the first segment of
//! every path the policy lists for the kind, `session_id`, and the fields the adapter derives from; a kind
//! whose adapter reads nested content is read whole). Every other value is checked as it is read — the
//! same grammar, number range, nesting limit and trailing-character rule as serde_json's value parser —
//! and dropped without being allocated or copied. Adapting, keying colony names, redacting and the range
//! check are the same functions as on the full path, applied to the planned fields.
//!
//! The answer is the full path's whenever [`process_line`] gives one: the policy and the adapter drop
//! every key outside the plan, so leaving them out before changes nothing they keep. Anything else — not
//! an object, a canonical event, a type that is not durable, no `seq` and no source identity (the id is
//! then a hash of the whole line), an ill-typed envelope field, a key the plan reads twice, bad JSON, a
//! line nested deeper than the sniff reads, an error of any step — is `None`, and the caller takes the
//! full path, which words any error as before. A test holds the two paths equal on the generated events
//! of every type and on the fixture streams.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::event::{CanonicalEvent, EventKind};
use crate::hive::{self, Adapted, Classification, Derive, FilterReason};
use crate::pipeline::{self, ProcessOptions};
use crate::usage::Contribution;

/// What became of a line the one-pass reader could decide.
#[derive(Debug, Clone, PartialEq)]
pub enum LineVerdict {
    /// Durable and allowed: the redacted canonical event, exactly as the full path keeps it, and what it
    /// adds to usage ([`crate::usage::contribution_of`] of it, found by the range check).
    Kept(Box<CanonicalEvent>, Option<Contribution>),
    /// A durable type that is not kept (no session, or a kind the policy does not allow), with its native
    /// type as the full path names it.
    Filtered {
        native_type: String,
        reason: FilterReason,
    },
}

/// Reads a native Hive line in one pass (see the module notes); `None` when the caller must take the
/// full path ([`crate::process_owned`] of the parsed value). The line is text: its callers check UTF-8
/// once for the whole line (and word that error themselves), so the reader does not check each string
/// of it again.
pub fn process_line(line: &str, opts: &ProcessOptions<'_>) -> Option<LineVerdict> {
    if line.trim_ascii_start().as_bytes().first() != Some(&b'{') {
        return None;
    }
    // Ignored values are checked by `deserialize_any`, which counts nesting as the value parser does; but
    // `data` read raw (before `type`) is parsed again on its own, where the count starts a level lower,
    // so a line deeper than the sniff's depth is left to the full path.
    if pipeline::openers(line.as_bytes()) > pipeline::MAX_SNIFF_DEPTH
        && pipeline::nesting(line.as_bytes()) > pipeline::MAX_SNIFF_DEPTH
    {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(line);
    let read = de
        .deserialize_any(LineVisitor {
            policy: opts.policy,
        })
        .ok()?;
    de.end().ok()?;
    let read = read?;
    let data = match read.data {
        Data::Read(map) => map,
        // `data` came before `type`: its kind was not known yet, so it was kept raw and is read now.
        Data::Raw(raw) => {
            let plan = Plan::of(read.kind, opts.policy);
            let mut de = serde_json::Deserializer::from_str(raw.get());
            let map = DataSeed { plan: &plan }.deserialize(&mut de).ok()?;
            de.end().ok()?;
            map
        }
    };
    let seq = read.seq.map(Value::from);
    let ctx = hive::Context {
        zone: opts.zone,
        source_identity: opts.source_identity,
        session_hint: opts.session_hint,
    };
    if seq.is_none() && ctx.source_identity.is_none() {
        // The id is a hash of the whole line, which was not built.
        return None;
    }
    let node_id = read.node_id.as_deref().filter(|s| !s.is_empty());
    let correlation_id = read.correlation_id.as_deref().filter(|s| !s.is_empty());
    let envelope = hive::Envelope {
        native_type: &read.native_type,
        stream_id: read.stream_id.as_deref().filter(|s| !s.is_empty()),
        execution_id: read.execution_id.as_deref().filter(|s| !s.is_empty()),
        colony_id: read.colony_id.as_deref().filter(|s| !s.is_empty()),
        timestamp: Some(read.timestamp.as_deref()?),
        seq: seq.as_ref(),
        node_id: Ok(node_id),
        correlation_id: Ok(correlation_id),
    };
    let adapted =
        hive::assemble(envelope, read.kind, read.derive, data, &ctx, &Value::Null).ok()?;
    let event = match adapted {
        Adapted::Event(event) => event,
        Adapted::Filtered {
            native_type,
            reason,
        } => {
            return Some(LineVerdict::Filtered {
                native_type,
                reason,
            })
        }
    };
    Some(match pipeline::finish_quietly(event, opts).ok()? {
        Some((event, contribution)) => LineVerdict::Kept(Box::new(event), contribution),
        None => LineVerdict::Filtered {
            native_type: read.native_type.into_owned(),
            reason: FilterReason::KindNotAllowed,
        },
    })
}

/// serde_json's marker for a raw value inside a map: with the `raw_value` feature the value parser reads
/// an object whose first key is this one differently, so a line holding it anywhere takes the full path.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// The keys of `data` that are built as values for one kind.
enum Plan<'p> {
    /// Every key (a kind whose adapter reads nested content: task and trigger ids, questions, colonies).
    All,
    /// The keys the policy's paths for the kind start with, and the adapter's inputs.
    Keys {
        policy: &'p crate::Policy,
        kind: EventKind,
        derived_from: &'static [&'static str],
    },
}

impl<'p> Plan<'p> {
    fn of(kind: EventKind, policy: &'p crate::Policy) -> Plan<'p> {
        match hive::derived_from(kind) {
            Some(derived_from) => Plan::Keys {
                policy,
                kind,
                derived_from,
            },
            None => Plan::All,
        }
    }

    fn reads(&self, key: &str) -> bool {
        match self {
            Plan::All => true,
            Plan::Keys {
                policy,
                kind,
                derived_from,
            } => {
                // `session_id` names the session of an event without `execution_id`.
                key == "session_id" || derived_from.contains(&key) || policy.lists_key(*kind, key)
            }
        }
    }
}

/// `data` as read so far.
enum Data<'de> {
    Read(Map<String, Value>),
    Raw(&'de RawValue),
}

/// What the line held, when it is one the one-pass reader decides.
struct Read<'de> {
    native_type: Cow<'de, str>,
    kind: EventKind,
    derive: Derive,
    stream_id: Option<Cow<'de, str>>,
    execution_id: Option<Cow<'de, str>>,
    colony_id: Option<Cow<'de, str>>,
    node_id: Option<Cow<'de, str>>,
    correlation_id: Option<Cow<'de, str>>,
    timestamp: Option<Cow<'de, str>>,
    seq: Option<i64>,
    data: Data<'de>,
}

/// The line's top-level object: `None` when it names no type; an error (which ends the read at once) for
/// anything else the reader leaves to the full path.
struct LineVisitor<'p> {
    policy: &'p crate::Policy,
}

/// A string, borrowed from the line unless it holds escapes. (serde's own `Cow<str>` always copies.)
struct Str<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Str<'de>, D::Error> {
        d.deserialize_str(StrVisitor)
    }
}

struct StrVisitor;

impl<'de> Visitor<'de> for StrVisitor {
    type Value = Str<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Str<'de>, E> {
        Ok(Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Str<'de>, E> {
        Ok(Str(Cow::Owned(s.to_string())))
    }
}

/// A string or null (an envelope id); anything else is an error.
struct OptStr<'de>(Option<Cow<'de, str>>);

impl<'de> Deserialize<'de> for OptStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OptStr<'de>, D::Error> {
        Option::<Str<'de>>::deserialize(d).map(|s| OptStr(s.map(|s| s.0)))
    }
}

impl<'de, 'p> Visitor<'de> for LineVisitor<'p> {
    type Value = Option<Read<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a native Hive event")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut native: Option<(Cow<'de, str>, EventKind, Derive)> = None;
        let mut plan: Option<Plan<'p>> = None;
        let (mut stream_id, mut execution_id, mut colony_id) = (None, None, None);
        let (mut node_id, mut correlation_id, mut timestamp) = (None, None, None);
        let mut seq: Option<Option<i64>> = None;
        let mut data: Option<Data<'de>> = None;
        let (mut schema_version, mut event_id) = (false, false);
        let twice = || A::Error::custom("a field the reader takes appears twice");
        while let Some(key) = map.next_key::<Str<'de>>()?.map(|k| k.0) {
            match key.as_ref() {
                "type" => {
                    if native.is_some() {
                        return Err(twice());
                    }
                    let t = map.next_value::<Str<'de>>()?.0;
                    match hive::classify(&t) {
                        Some(Classification::Durable(kind, derive)) => {
                            plan = Some(Plan::of(kind, self.policy));
                            native = Some((t, kind, derive));
                        }
                        // Filtered, unknown or canonical (`llm.turn`): the rest is not read.
                        _ => return Err(A::Error::custom("not a durable Hive type")),
                    }
                }
                "data" => {
                    if data.is_some() {
                        return Err(twice());
                    }
                    data = Some(match &plan {
                        Some(plan) => Data::Read(map.next_value_seed(DataSeed { plan })?),
                        None => Data::Raw(map.next_value::<&'de RawValue>()?),
                    });
                }
                "stream_id" => set_once(&mut stream_id, map.next_value::<OptStr>()?.0, &twice)?,
                "execution_id" => {
                    set_once(&mut execution_id, map.next_value::<OptStr>()?.0, &twice)?
                }
                "colony_id" => set_once(&mut colony_id, map.next_value::<OptStr>()?.0, &twice)?,
                "node_id" => set_once(&mut node_id, map.next_value::<OptStr>()?.0, &twice)?,
                "correlation_id" => {
                    set_once(&mut correlation_id, map.next_value::<OptStr>()?.0, &twice)?
                }
                "timestamp" => {
                    let t = map.next_value::<Str<'de>>()?.0;
                    set_once(&mut timestamp, Some(t), &twice)?
                }
                "seq" => {
                    if seq.is_some() {
                        return Err(twice());
                    }
                    seq = Some(map.next_value::<Option<i64>>()?);
                }
                "schema_version" => {
                    schema_version = true;
                    map.next_value::<Checked>()?;
                }
                "event_id" => {
                    event_id = true;
                    map.next_value::<Checked>()?;
                }
                RAW_VALUE_TOKEN => return Err(A::Error::custom("a raw value marker")),
                _ => {
                    map.next_value::<Checked>()?;
                }
            }
            if schema_version && event_id {
                return Err(A::Error::custom("a canonical event"));
            }
        }
        let Some((native_type, kind, derive)) = native else {
            return Ok(None);
        };
        Ok(Some(Read {
            native_type,
            kind,
            derive,
            stream_id: stream_id.flatten(),
            execution_id: execution_id.flatten(),
            colony_id: colony_id.flatten(),
            node_id: node_id.flatten(),
            correlation_id: correlation_id.flatten(),
            timestamp: timestamp.flatten(),
            seq: seq.flatten(),
            data: data.unwrap_or(Data::Read(Map::new())),
        }))
    }
}

/// Sets an envelope field read for the first time; a second one is an error (the value parser would
/// keep the last, which the reader does not follow).
fn set_once<'de, E>(
    slot: &mut Option<Option<Cow<'de, str>>>,
    value: Option<Cow<'de, str>>,
    twice: &impl Fn() -> E,
) -> Result<(), E> {
    if slot.is_some() {
        return Err(twice());
    }
    *slot = Some(value);
    Ok(())
}

/// `data`: an object (the planned keys built, the rest checked and dropped) or null.
struct DataSeed<'a, 'p> {
    plan: &'a Plan<'p>,
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_, '_> {
    type Value = Map<String, Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DataSeed<'_, '_> {
    type Value = Map<String, Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object or null")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Map::new())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<Str<'de>>()?.map(|k| k.0) {
            if key == RAW_VALUE_TOKEN {
                return Err(A::Error::custom("a raw value marker"));
            }
            if self.plan.reads(&key) {
                let value: Value = map.next_value()?;
                if out.insert(key.into_owned(), value).is_some() {
                    return Err(A::Error::custom("a planned key appears twice"));
                }
            } else {
                map.next_value::<Checked>()?;
            }
        }
        Ok(out)
    }
}

/// A value read as the value parser reads it (every number in range, every string valid, nesting
/// counted) and dropped; an object holding serde_json's raw value marker is an error.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Checked, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while let Some(key) = map.next_key::<Str<'de>>()?.map(|k| k.0) {
            if key == RAW_VALUE_TOKEN {
                return Err(A::Error::custom("a raw value marker"));
            }
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

#[cfg(test)]
mod tests;
