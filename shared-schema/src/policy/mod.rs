//! The allowlist redaction engine.
//!
//! A [`Policy`] lists, per canonical [`EventKind`], the `data` fields that may leave the device and the
//! [`ValueKind`] each may hold (see `policy/default.toml`, which ships in the binary). Applying it:
//! - drops the whole event when its kind is not in the policy (counted as `policy: kind not allowed`);
//! - keeps a field only when its path is listed **and** its value has the listed kind; everything else is
//!   dropped, and only its *path* is reported, never its value;
//! - scrubs every kept string for secrets ([`crate::scrub`]) and normalises envelope ids.
//!
//! Nested objects are addressed with dotted paths (`usage.input_tokens`); a listed path keeps only a
//! scalar of the listed kind, so an object or array can never ride along under an allowed name. The one
//! exception is a field of kind `{ records = {..}, max = N }`: a list of at most `N` flat objects, each
//! redacted field by field like an event's `data` (paths reported as `field[].key`); an element that
//! keeps nothing is dropped, a list longer than `N` loses its tail (reported). The agent's heartbeat
//! uses it for per-session runtime liveness.
//!
//! The policy is versioned and hashed: the hash is SHA-256 over a canonical JSON form (independent of
//! comments and key order in the TOML) and travels with every batch. The ingest uses [`Policy::check`] to
//! refuse any event that holds something the policy does not allow.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::event::{CanonicalEvent, EventKind};
use crate::scrub;

/// The policy that ships in the binary.
pub const DEFAULT_POLICY_TOML: &str = include_str!("../../policy/default.toml");

/// What a field may hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ValueKind {
    Simple(SimpleKind),
    Enum {
        #[serde(rename = "enum")]
        values: Vec<String>,
    },
    /// A list of at most `max` flat objects whose fields are of these scalar kinds.
    Records {
        records: BTreeMap<String, SimpleKind>,
        max: usize,
    },
}

/// The scalar kinds (see the header of `policy/default.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SimpleKind {
    Count,
    Number,
    Bool,
    Id,
    Name,
    Word,
    /// An absolute time in integer Unix epoch milliseconds (Hive's `next_fire_at`, `last_fired_at`).
    Timestamp,
}

/// The on-disk (TOML) form of a policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    policy_version: u32,
    name: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    allow_widening: bool,
    #[serde(default)]
    kinds: BTreeMap<String, BTreeMap<String, ValueKind>>,
}

/// A loaded, validated policy.
#[derive(Debug, Clone)]
pub struct Policy {
    name: String,
    version: u32,
    kinds: BTreeMap<EventKind, BTreeMap<String, ValueKind>>,
    /// Per kind, the `data` keys any listed path starts with (`usage` for `usage.input_tokens`), sorted:
    /// compiled at load, so a reader can skip every other key without looking at the paths.
    top_keys: BTreeMap<EventKind, Vec<String>>,
    hash: String,
}

/// The first segment of each path, sorted and without repeats.
fn top_keys_of(
    kinds: &BTreeMap<EventKind, BTreeMap<String, ValueKind>>,
) -> BTreeMap<EventKind, Vec<String>> {
    kinds
        .iter()
        .map(|(kind, fields)| {
            let mut keys: Vec<String> = fields
                .keys()
                .map(|p| p.split('.').next().unwrap_or(p).to_string())
                .collect();
            keys.sort();
            keys.dedup();
            (*kind, keys)
        })
        .collect()
}

/// Errors loading a policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy is not valid TOML: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("policy names an unknown event kind {0:?} (known: {known})", known = known_kinds())]
    UnknownKind(String),
    #[error("policy field {kind}.{field}: {why}")]
    BadField {
        kind: String,
        field: String,
        why: String,
    },
    #[error("policy widens the default for {0}; set `allow_widening = true` in it to do that on purpose")]
    Widens(String),
}

fn known_kinds() -> String {
    EventKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a field was dropped or why [`Policy::check`] refused an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldIssue {
    /// Dotted path of the field inside `data`.
    pub path: String,
    /// `not allowlisted`, or `expected <kind>`.
    pub why: String,
}

/// What applying the policy did to one event. Holds paths, never values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RedactionReport {
    /// Paths kept.
    pub kept: Vec<String>,
    /// Paths dropped, with the reason.
    pub dropped: Vec<FieldIssue>,
    /// Paths (including envelope fields) whose string value was scrubbed or hashed.
    pub scrubbed: Vec<String>,
}

/// The event kind is not in the policy at all: the event must be filtered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("policy does not allow events of kind {0}")]
pub struct KindNotAllowed(pub EventKind);

impl Policy {
    /// The policy that ships in the binary.
    pub fn default_policy() -> Policy {
        Policy::from_toml(DEFAULT_POLICY_TOML).expect("the shipped default policy is valid")
    }

    /// Parses and validates a policy. It may list anything; see [`Policy::load_user`] for the
    /// narrowing-only rule applied to user-supplied files.
    pub fn from_toml(text: &str) -> Result<Policy, PolicyError> {
        let file: PolicyFile = toml::from_str(text)?;
        Policy::from_file(file)
    }

    /// Loads a user policy: it must only narrow `base` (every field it lists is in `base` with the same
    /// kind) unless it sets `allow_widening = true`.
    pub fn load_user(text: &str, base: &Policy) -> Result<Policy, PolicyError> {
        let file: PolicyFile = toml::from_str(text)?;
        let allow_widening = file.allow_widening;
        let policy = Policy::from_file(file)?;
        if !allow_widening {
            for (kind, fields) in &policy.kinds {
                for (path, vk) in fields {
                    let base_vk = base.kinds.get(kind).and_then(|f| f.get(path));
                    let narrower = match (base_vk, vk) {
                        (None, _) => false,
                        (Some(b), v) if b == v => true,
                        (Some(ValueKind::Enum { values: b }), ValueKind::Enum { values: v }) => {
                            v.iter().all(|x| b.contains(x))
                        }
                        (
                            Some(ValueKind::Records {
                                records: b,
                                max: bm,
                            }),
                            ValueKind::Records {
                                records: v,
                                max: vm,
                            },
                        ) => vm <= bm && v.iter().all(|(k, kind)| b.get(k) == Some(kind)),
                        _ => false,
                    };
                    if !narrower {
                        return Err(PolicyError::Widens(format!("{kind}.{path}")));
                    }
                }
            }
        }
        Ok(policy)
    }

    fn from_file(file: PolicyFile) -> Result<Policy, PolicyError> {
        let mut kinds = BTreeMap::new();
        for (name, fields) in &file.kinds {
            let kind =
                EventKind::parse(name).ok_or_else(|| PolicyError::UnknownKind(name.clone()))?;
            for (path, vk) in fields {
                let bad = |why: &str| PolicyError::BadField {
                    kind: name.clone(),
                    field: path.clone(),
                    why: why.into(),
                };
                if path.is_empty() || path.split('.').any(str::is_empty) {
                    return Err(bad("empty path segment"));
                }
                if let ValueKind::Enum { values } = vk {
                    if values.is_empty() {
                        return Err(bad("enum has no values"));
                    }
                    if values.iter().any(|v| !scrub::is_clean(v)) {
                        return Err(bad("enum value looks like a secret"));
                    }
                }
                if let ValueKind::Records { records, max } = vk {
                    if records.is_empty() || *max == 0 || *max > MAX_RECORDS {
                        return Err(bad(&format!(
                            "records need at least one field and a max of 1 to {MAX_RECORDS}"
                        )));
                    }
                }
            }
            kinds.insert(kind, fields.clone());
        }
        let hash = hash_of(file.policy_version, &file.kinds);
        Ok(Policy {
            name: file.name,
            version: file.policy_version,
            top_keys: top_keys_of(&kinds),
            kinds,
            hash,
        })
    }

    /// SHA-256 (hex) of the policy's canonical form.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The policy's version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The fields allowed for a kind, if the kind is allowed at all.
    pub fn fields(&self, kind: EventKind) -> Option<&BTreeMap<String, ValueKind>> {
        self.kinds.get(&kind)
    }

    /// True when a path allowed for `kind` is `key` or lies under it (`key.…`).
    pub fn lists_key(&self, kind: EventKind, key: &str) -> bool {
        self.top_keys
            .get(&kind)
            .is_some_and(|keys| keys.binary_search_by(|k| k.as_str().cmp(key)).is_ok())
    }

    /// This policy, letting a colony's name (`colony.created` `colony_name`, kind `name`) leave the
    /// device too: the policy in force on a device whose user consented to the tenant's `names`
    /// choice (see [`crate::colony`]), and the ingest's check for such a tenant. Named `<name>+colony_names`
    /// with its own hash. A policy without `colony.created`, or that lists `colony_name` already, is
    /// returned as it is.
    pub fn with_colony_names(&self) -> Policy {
        let mut wider = self.clone();
        let Some(fields) = wider.kinds.get_mut(&EventKind::ColonyCreated) else {
            return wider;
        };
        if fields.contains_key(crate::colony::NAME_FIELD) {
            return wider;
        }
        fields.insert(
            crate::colony::NAME_FIELD.to_string(),
            ValueKind::Simple(SimpleKind::Name),
        );
        let by_name = wider
            .kinds
            .iter()
            .map(|(k, f)| (k.as_str().to_string(), f.clone()))
            .collect();
        wider.hash = hash_of(wider.version, &by_name);
        wider.name = format!("{}+colony_names", self.name);
        wider.top_keys = top_keys_of(&wider.kinds);
        wider
    }

    /// True when colony names pass this policy.
    pub fn lets_colony_names_out(&self) -> bool {
        self.fields(EventKind::ColonyCreated)
            .is_some_and(|f| f.contains_key(crate::colony::NAME_FIELD))
    }

    /// Redacts `event` in place: drops every non-allowlisted or ill-typed field, scrubs strings and
    /// normalises envelope ids. Err when the kind is not allowed at all (the caller filters the event).
    pub fn apply(&self, event: &mut CanonicalEvent) -> Result<RedactionReport, KindNotAllowed> {
        let mut report = RedactionReport::default();
        self.apply_to(event, &mut report)?;
        Ok(report)
    }

    /// [`Policy::apply`] without the report: the same event, none of the paths' strings.
    pub fn apply_quietly(&self, event: &mut CanonicalEvent) -> Result<(), KindNotAllowed> {
        self.apply_to(event, &mut NoReport)
    }

    fn apply_to(
        &self,
        event: &mut CanonicalEvent,
        report: &mut impl Report,
    ) -> Result<(), KindNotAllowed> {
        let fields = self
            .kinds
            .get(&event.kind)
            .ok_or(KindNotAllowed(event.kind))?;
        normalise_envelope(event, report);
        let data = std::mem::take(&mut event.data);
        let mut kept = Map::new();
        redact_object(data, "", fields, &mut kept, report);
        event.data = kept;
        Ok(())
    }

    /// Checks, without changing it, that `event` holds nothing this policy would drop or scrub. The ingest
    /// uses this as defence in depth: any issue rejects the event.
    pub fn check(&self, event: &CanonicalEvent) -> Result<(), Vec<FieldIssue>> {
        let mut copy = event.clone();
        let report = match self.apply(&mut copy) {
            Ok(r) => r,
            Err(e) => {
                return Err(vec![FieldIssue {
                    path: "type".into(),
                    why: e.to_string(),
                }])
            }
        };
        let mut issues = report.dropped;
        issues.extend(report.scrubbed.into_iter().map(|path| FieldIssue {
            path,
            why: "holds a secret-like or non-id value".into(),
        }));
        if issues.is_empty() {
            Ok(())
        } else {
            Err(issues)
        }
    }
}

/// SHA-256 (hex) of the hashed form: everything that changes what the policy lets through (its
/// version and its kinds' fields), nothing else.
fn hash_of(version: u32, kinds: &BTreeMap<String, BTreeMap<String, ValueKind>>) -> String {
    let canonical = serde_json::json!({ "policy_version": version, "kinds": kinds });
    let bytes = serde_json::to_vec(&canonical).expect("policy serialises");
    hex::encode(Sha256::digest(&bytes))
}

/// Where redaction notes what it did: a [`RedactionReport`], or nowhere ([`NoReport`]). Paths and
/// reasons are made only when they are recorded.
trait Report {
    fn kept(&mut self, path: impl FnOnce() -> String);
    fn dropped(&mut self, path: impl FnOnce() -> String, why: impl FnOnce() -> String);
    fn scrubbed(&mut self, path: impl FnOnce() -> String);
    /// A scrubbed path, once however many elements of a record list it was scrubbed in.
    fn scrubbed_once(&mut self, path: impl FnOnce() -> String);
}

impl Report for RedactionReport {
    fn kept(&mut self, path: impl FnOnce() -> String) {
        self.kept.push(path());
    }
    fn dropped(&mut self, path: impl FnOnce() -> String, why: impl FnOnce() -> String) {
        self.dropped.push(FieldIssue {
            path: path(),
            why: why(),
        });
    }
    fn scrubbed(&mut self, path: impl FnOnce() -> String) {
        self.scrubbed.push(path());
    }
    fn scrubbed_once(&mut self, path: impl FnOnce() -> String) {
        let p = path();
        if !self.scrubbed.contains(&p) {
            self.scrubbed.push(p);
        }
    }
}

/// Records nothing.
struct NoReport;

impl Report for NoReport {
    fn kept(&mut self, _: impl FnOnce() -> String) {}
    fn dropped(&mut self, _: impl FnOnce() -> String, _: impl FnOnce() -> String) {}
    fn scrubbed(&mut self, _: impl FnOnce() -> String) {}
    fn scrubbed_once(&mut self, _: impl FnOnce() -> String) {}
}

fn normalise_envelope(event: &mut CanonicalEvent, report: &mut impl Report) {
    let slots: [(&str, &mut Option<String>); 7] = [
        ("session_id", &mut event.session_id),
        ("parent_session_id", &mut event.parent_session_id),
        ("colony_id", &mut event.colony_id),
        ("worker_id", &mut event.worker_id),
        ("node_id", &mut event.node_id),
        ("execution_id", &mut event.execution_id),
        ("trace_id", &mut event.trace_id),
    ];
    for (name, slot) in slots {
        if let Some(v) = slot.as_mut() {
            if let Some(fixed) = normalise_id(v) {
                *v = fixed;
                report.scrubbed(|| name.to_string());
            }
        }
    }
    if !is_word(&event.native_type) {
        event.native_type =
            normalise_id(&event.native_type).unwrap_or_else(|| event.native_type.clone());
        report.scrubbed(|| "native_type".into());
    }
    if !is_word(&event.runtime) {
        event.runtime = "unknown".into();
        report.scrubbed(|| "runtime".into());
    }
}

fn redact_object(
    obj: Map<String, Value>,
    prefix: &str,
    fields: &BTreeMap<String, ValueKind>,
    out: &mut Map<String, Value>,
    report: &mut impl Report,
) {
    for (key, value) in obj {
        // At the top, the path is the key itself: no string is made for it.
        let nested_path;
        let path: &str = if prefix.is_empty() {
            &key
        } else {
            nested_path = format!("{prefix}.{key}");
            &nested_path
        };
        match fields.get(path) {
            Some(ValueKind::Records { records, max }) => {
                match redact_records(value, path, records, *max, report) {
                    Some(v) => {
                        report.kept(|| path.to_string());
                        out.insert(key, v);
                    }
                    None => {
                        report.dropped(|| path.to_string(), || "expected a list of objects".into())
                    }
                }
            }
            Some(vk) => match conform(value, vk) {
                Ok((v, scrubbed)) => {
                    if scrubbed {
                        report.scrubbed(|| path.to_string());
                    }
                    report.kept(|| path.to_string());
                    out.insert(key, v);
                }
                Err(why) => report.dropped(|| path.to_string(), || why),
            },
            None => match value {
                Value::Object(inner) if lists_under(fields, path) => {
                    let mut inner_out = Map::new();
                    redact_object(inner, path, fields, &mut inner_out, report);
                    if !inner_out.is_empty() {
                        out.insert(key, Value::Object(inner_out));
                    }
                }
                _ => report.dropped(|| path.to_string(), || "not allowlisted".into()),
            },
        }
    }
}

/// True when `fields` lists a path under `path` (`path.…`).
fn lists_under(fields: &BTreeMap<String, ValueKind>, path: &str) -> bool {
    let nested_prefix = format!("{path}.");
    fields
        .range::<str, _>((
            std::ops::Bound::Included(nested_prefix.as_str()),
            std::ops::Bound::Unbounded,
        ))
        .next()
        .is_some_and(|(p, _)| p.starts_with(&nested_prefix))
}

/// Most elements a `records` field may allow.
pub const MAX_RECORDS: usize = 1000;

/// A `records` field: each element's listed fields that fit their kind (paths `field[].key` in the
/// report), at most `max` elements (the rest reported dropped). None when the value is not a list.
fn redact_records(
    value: Value,
    path: &str,
    records: &BTreeMap<String, SimpleKind>,
    max: usize,
    report: &mut impl Report,
) -> Option<Value> {
    let Value::Array(items) = value else {
        return None;
    };
    if items.len() > max {
        report.dropped(
            || format!("{path}[{max}..]"),
            || format!("at most {max} elements"),
        );
    }
    let mut out = Vec::new();
    for item in items.into_iter().take(max) {
        let Value::Object(obj) = item else {
            report.dropped(|| format!("{path}[]"), || "expected an object".into());
            continue;
        };
        let mut kept = Map::new();
        for (k, v) in obj {
            let p = || format!("{path}[].{k}");
            match records.get(&k) {
                None => report.dropped(p, || "not allowlisted".into()),
                Some(kind) => match conform(v, &ValueKind::Simple(*kind)) {
                    Ok((v, scrubbed)) => {
                        if scrubbed {
                            report.scrubbed_once(p);
                        }
                        kept.insert(k, v);
                    }
                    Err(why) => report.dropped(p, || why),
                },
            }
        }
        if !kept.is_empty() {
            out.push(Value::Object(kept));
        }
    }
    Some(Value::Array(out))
}

/// Returns the value as the kind allows it (and whether a string was scrubbed), or why it does not fit.
fn conform(value: Value, vk: &ValueKind) -> Result<(Value, bool), String> {
    let expected = |what: &str| Err(format!("expected {what}"));
    match vk {
        ValueKind::Simple(SimpleKind::Count) => match value.as_u64() {
            Some(n) => Ok((Value::from(n), false)),
            None => expected("count"),
        },
        ValueKind::Simple(SimpleKind::Number) => match value.as_f64() {
            Some(x) if x.is_finite() && value.is_number() => Ok((value, false)),
            _ => expected("number"),
        },
        ValueKind::Simple(SimpleKind::Bool) => match value {
            Value::Bool(_) => Ok((value, false)),
            _ => expected("bool"),
        },
        ValueKind::Simple(SimpleKind::Id) => match value {
            Value::String(s) => Ok(match normalise_id(&s) {
                Some(h) => (Value::String(h), true),
                None => (Value::String(s), false),
            }),
            // Runtimes number some ids (Hive's task ids); ids travel as strings.
            Value::Number(n) if n.is_u64() => Ok((Value::String(n.to_string()), false)),
            _ => expected("id"),
        },
        ValueKind::Simple(SimpleKind::Name) => match value {
            Value::String(s)
                if !s.is_empty()
                    && s.chars().count() <= 128
                    && !s.chars().any(char::is_control) =>
            {
                match scrub::scrub(&s) {
                    std::borrow::Cow::Borrowed(_) => Ok((Value::String(s), false)),
                    std::borrow::Cow::Owned(clean) => Ok((Value::String(clean), true)),
                }
            }
            _ => expected("name (a single line of at most 128 characters)"),
        },
        // A key can be spelled in word characters (`sk-ant-api03-…` in lower case): a word the scrubber
        // would touch is not a word.
        ValueKind::Simple(SimpleKind::Word) => match value {
            Value::String(s) if is_word(&s) && scrub::is_clean(&s) => Ok((Value::String(s), false)),
            _ => expected("word ([a-z0-9_.-], at most 64, nothing secret-like)"),
        },
        ValueKind::Simple(SimpleKind::Timestamp) => match value.as_u64() {
            Some(ms) if ms <= MAX_TIMESTAMP_MS => Ok((Value::from(ms), false)),
            _ => expected("timestamp (integer Unix epoch milliseconds)"),
        },
        ValueKind::Enum { values } => match value {
            Value::String(s) if values.contains(&s) => Ok((Value::String(s), false)),
            _ => expected(&format!("one of {}", values.join("|"))),
        },
        ValueKind::Records { .. } => expected("a list of objects"),
    }
}

/// The latest `timestamp` value allowed: 9999-12-31T23:59:59.999Z.
const MAX_TIMESTAMP_MS: u64 = 253_402_300_799_999;

/// A lowercase token: `[a-z0-9_.-]{1,64}`.
pub fn is_word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-'))
}

/// An identifier: `[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,199}`, with nothing the scrubber would catch.
pub fn is_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 200
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'@' | b'+' | b'=' | b'-')
        })
        && clean_id(s)
}

/// How many ids each thread remembers as clean.
const CLEAN_IDS: usize = 8;

thread_local! {
    /// The ids this thread last found clean, most recent first. An event's envelope names its session,
    /// execution, node and colony, and the next event of the same session names the same ones: the
    /// scrubber's patterns ran over each of them for every event (id checks were 4,250 of the 10,800
    /// instructions a kept Hive event's redaction took).
    static RECENT_CLEAN: std::cell::RefCell<Vec<Box<str>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`scrub::is_clean`] of an id-shaped string, remembered for the last [`CLEAN_IDS`] clean ones (the
/// scrubber is a pure function of the string; only clean answers are kept).
fn clean_id(s: &str) -> bool {
    let known = RECENT_CLEAN.with(|recent| {
        let mut recent = recent.borrow_mut();
        match recent.iter().position(|id| **id == *s) {
            Some(0) => true,
            Some(at) => {
                recent[..=at].rotate_right(1);
                true
            }
            None => false,
        }
    });
    if known {
        return true;
    }
    if !scrub::is_clean(s) {
        return false;
    }
    RECENT_CLEAN.with(|recent| {
        let mut recent = recent.borrow_mut();
        if recent.len() == CLEAN_IDS {
            recent.pop();
        }
        recent.insert(0, s.into());
    });
    true
}

/// `None` when `s` is already a valid id; else its stable hashed form `h:<32 hex>`.
pub fn normalise_id(s: &str) -> Option<String> {
    if is_id(s) {
        None
    } else {
        Some(format!(
            "h:{}",
            &hex::encode(Sha256::digest(s.as_bytes()))[..32]
        ))
    }
}

#[cfg(test)]
pub(crate) mod canary;
#[cfg(test)]
mod canary_otlp;
#[cfg(test)]
mod tests;
