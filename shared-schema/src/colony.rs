//! The colony key: a stable id for a named colony that does not reveal its name.
//!
//! A Hive colony has a name chosen by its user (`colony_created.data.colony_name`,
//! `worker_colony_loaded.data.colony_name` / `colony_id`, which in Hive is the colony's directory name).
//! Names are free text, so they never leave the device. Instead the agent derives
//!
//! ```text
//! colony_key = "ck_" + hex(HMAC-SHA256(tenant secret, name))[..32]
//! ```
//!
//! on the device, in the pipeline step that runs before the redaction policy ([`key_colony_name`]), so
//! the outbox only ever holds the key. The **tenant secret** is 32 random bytes the ingest generates once
//! per tenant (on first use) and hands to the tenant's ingest tokens in `GET /v1/whoami`; the agent keeps
//! it in its outbox. The same name gives the same key on every device and every day of the tenant, and
//! different keys in different tenants.
//!
//! **Before the tenant secret is known** (sync never enabled, the ingest unreachable so far, air-gapped)
//! the agent uses a **device secret** it generated itself: `"dk_" + …` keys, stable on that device, that
//! nobody else (the ingest included) can link to the same name on another device. A colony first seen
//! then keeps its device key for those runs; runs after the tenant secret arrived carry the tenant key.
//!
//! **Length**: 128 bits (32 hex digits), half of SHA-256's output, the shortest truncation RFC 2104
//! recommends. Collisions among one tenant's colonies need ~2^64 names; guessing a name from its key is
//! as hard as the secret allows, whatever the length. The prefix says which secret made it.
//!
//! The name is taken byte for byte (Hive restricts colony names to `[a-z0-9_]+`).
//!
//! ## Names, opt-in per tenant ([`ColonyNames`])
//! A tenant's admin may choose `names` (`PUT /v1/tenant/settings`, `apiary-ingest tenant set
//! --colony-names names`); `GET /v1/whoami` tells each device. A device whose user turned sharing on
//! while the tenant said `names` (the consent records it) keeps the name beside the key
//! ([`ColonyKeyer::sharing_names`]), and the policy lets `colony_name` pass ([`crate::Policy::with_colony_names`]).
//! Every other device, and every device of a `keys` tenant, never lets a name out.

use hmac::{Hmac, Mac};
#[cfg(feature = "json-schema")]
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

use crate::event::{CanonicalEvent, EventKind};

/// Length of a secret in bytes.
pub const SECRET_BYTES: usize = 32;
/// Hex digits of the HMAC kept in a key (128 bits).
pub const KEY_HEX_DIGITS: usize = 32;
/// The data field that carries the key.
pub const KEY_FIELD: &str = "colony_key";
/// The data field that carries the name until it is keyed (dropped by the policy if it ever reaches it).
pub const NAME_FIELD: &str = "colony_name";

/// What a tenant lets its devices send about a colony: its key only (the default), or its name too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ColonyNames {
    /// Colonies travel as keys only; names never leave a device.
    #[default]
    Keys,
    /// A device whose user consented sends the colony's name beside its key.
    Names,
}

impl ColonyNames {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ColonyNames::Keys => "keys",
            ColonyNames::Names => "names",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<ColonyNames> {
        match s {
            "keys" => Some(ColonyNames::Keys),
            "names" => Some(ColonyNames::Names),
            _ => None,
        }
    }
}

impl std::fmt::Display for ColonyNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ColonyNames {
    type Err = String;

    fn from_str(s: &str) -> Result<ColonyNames, String> {
        ColonyNames::parse(s).ok_or_else(|| format!("{s:?} is not keys or names"))
    }
}

/// Which secret made a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyScope {
    /// The tenant's secret from the ingest: the same name gives the same key on every device of the tenant.
    Tenant,
    /// This device's own secret, used until the tenant's is known.
    Device,
}

impl KeyScope {
    fn prefix(self) -> &'static str {
        match self {
            KeyScope::Tenant => "ck_",
            KeyScope::Device => "dk_",
        }
    }
}

/// Derives colony keys with one secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ColonyKeyer {
    secret: [u8; SECRET_BYTES],
    scope: KeyScope,
    /// Keep the name beside the key ([`ColonyKeyer::sharing_names`]); off unless asked for.
    names: bool,
}

impl std::fmt::Debug for ColonyKeyer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("ColonyKeyer")
            .field("scope", &self.scope)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

/// A secret that is not 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a colony secret is 64 hexadecimal digits")]
pub struct BadSecret;

impl ColonyKeyer {
    /// A keyer over `secret` given as 64 hex digits.
    pub fn from_hex(secret: &str, scope: KeyScope) -> Result<ColonyKeyer, BadSecret> {
        let bytes = hex::decode(secret.trim()).map_err(|_| BadSecret)?;
        let secret: [u8; SECRET_BYTES] = bytes.try_into().map_err(|_| BadSecret)?;
        Ok(ColonyKeyer {
            secret,
            scope,
            names: false,
        })
    }

    /// The same keyer, keeping each colony's name beside its key when `names` is true: for a device
    /// whose user consented while the tenant shares names (see the module notes). Device keys (`dk_`)
    /// never share names: the tenant's choice is not known before its secret is.
    pub fn sharing_names(mut self, names: bool) -> ColonyKeyer {
        self.names = names && self.scope == KeyScope::Tenant;
        self
    }

    /// True when names travel beside keys.
    pub fn shares_names(&self) -> bool {
        self.names
    }

    /// Which secret this is.
    pub fn scope(&self) -> KeyScope {
        self.scope
    }

    /// The key of the colony called `name`.
    pub fn key_of(&self, name: &str) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes a key of any length");
        mac.update(name.as_bytes());
        let digest = hex::encode(mac.finalize().into_bytes());
        format!("{}{}", self.scope.prefix(), &digest[..KEY_HEX_DIGITS])
    }
}

/// True for a string shaped like a colony key (`ck_` or `dk_` and 32 lowercase hex digits).
pub fn is_colony_key(s: &str) -> bool {
    let rest = s.strip_prefix("ck_").or_else(|| s.strip_prefix("dk_"));
    rest.is_some_and(|r| {
        r.len() == KEY_HEX_DIGITS && r.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Replaces a `colony.created` event's colony name by its key (run before the redaction policy).
/// Any `colony_key` the producer sent is dropped first: only a key derived here may leave the device,
/// so a producer cannot smuggle a name out as a "key". Without a keyer the name stays for the policy,
/// which drops it (and counts it). A keyer [`ColonyKeyer::shares_names`] keeps the name beside the key,
/// for a policy that lets it pass ([`crate::Policy::with_colony_names`]).
pub fn key_colony_name(event: &mut CanonicalEvent, keyer: Option<&ColonyKeyer>) {
    if event.kind != EventKind::ColonyCreated {
        return;
    }
    event.data.remove(KEY_FIELD);
    let Some(keyer) = keyer else { return };
    let name = match event.data.remove(NAME_FIELD) {
        Some(Value::String(name)) if !name.is_empty() => name,
        Some(other) => {
            // Not a name: put it back for the policy to drop and count.
            event.data.insert(NAME_FIELD.into(), other);
            return;
        }
        None => return,
    };
    event
        .data
        .insert(KEY_FIELD.into(), Value::String(keyer.key_of(&name)));
    if keyer.shares_names() {
        event.data.insert(NAME_FIELD.into(), Value::String(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T1: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const T2: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

    fn tenant(secret: &str) -> ColonyKeyer {
        ColonyKeyer::from_hex(secret, KeyScope::Tenant).unwrap()
    }

    #[test]
    fn the_same_name_under_the_same_secret_always_gives_the_same_key() {
        let a = tenant(T1).key_of("billing_refactor");
        assert_eq!(a, tenant(T1).key_of("billing_refactor"));
        assert!(is_colony_key(&a), "{a}");
        assert_eq!(a.len(), 3 + KEY_HEX_DIGITS);
        // Pinned: a change of the derivation would change every stored key.
        assert_eq!(a, pinned_key(T1, "billing_refactor"));
    }

    /// HMAC-SHA256 written out from its definition (RFC 2104), independent of the `hmac` crate.
    fn pinned_key(secret_hex: &str, name: &str) -> String {
        use sha2::Digest;
        let mut key = hex::decode(secret_hex).unwrap();
        key.resize(64, 0);
        let pad = |b: u8| key.iter().map(|k| k ^ b).collect::<Vec<u8>>();
        let inner = Sha256::new()
            .chain_update(pad(0x36))
            .chain_update(name.as_bytes())
            .finalize();
        let outer = Sha256::new()
            .chain_update(pad(0x5c))
            .chain_update(inner)
            .finalize();
        format!("ck_{}", &hex::encode(outer)[..32])
    }

    #[test]
    fn keys_differ_by_name_by_tenant_and_by_scope() {
        let k = tenant(T1).key_of("billing_refactor");
        assert_ne!(k, tenant(T1).key_of("deps_audit"));
        assert_ne!(k, tenant(T2).key_of("billing_refactor"));
        let device = ColonyKeyer::from_hex(T1, KeyScope::Device).unwrap();
        let d = device.key_of("billing_refactor");
        assert!(d.starts_with("dk_") && is_colony_key(&d));
        assert_eq!(d[3..], k[3..], "the scope only changes the prefix");
    }

    #[test]
    fn a_key_holds_nothing_of_the_name() {
        for name in ["billing_refactor", "zzcanary0042", "q", "deps_audit_2026"] {
            let key = tenant(T1).key_of(name);
            assert!(!key.contains(name), "{key} contains {name}");
            assert!(
                !format!("{:?}", tenant(T1)).contains("0011"),
                "Debug shows the secret"
            );
        }
    }

    #[test]
    fn bad_secrets_are_refused() {
        for bad in [
            "",
            "00",
            &T1[..62],
            &format!("{T1}00"),
            &T1.replace('0', "g"),
        ] {
            assert_eq!(
                ColonyKeyer::from_hex(bad, KeyScope::Tenant),
                Err(BadSecret),
                "{bad}"
            );
        }
        assert!(!is_colony_key("ck_billing_refactor"));
        assert!(!is_colony_key(&format!("xk_{}", "0".repeat(32))));
    }

    #[test]
    fn keying_replaces_the_name_and_drops_a_producers_own_key() {
        let mut event: CanonicalEvent = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "event_id": "6a1f5c2e-9b3d-4e7a-8c10-2f4bd5e6a701",
            "type": "colony.created", "occurred_at": "2026-11-03T10:00:00Z", "runtime": "hive",
            "session_id": "s1", "agent_role": "queen", "native_type": "colony_created",
            "data": {"colony_name": "billing_refactor", "colony_key": "smuggled_name"}
        }))
        .unwrap();
        let mut unkeyed = event.clone();
        key_colony_name(&mut event, Some(&tenant(T1)));
        assert_eq!(
            event.data.get(KEY_FIELD).and_then(Value::as_str),
            Some(tenant(T1).key_of("billing_refactor").as_str())
        );
        assert!(!event.data.contains_key(NAME_FIELD));
        key_colony_name(&mut unkeyed, None);
        assert!(!unkeyed.data.contains_key(KEY_FIELD));
        assert!(
            unkeyed.data.contains_key(NAME_FIELD),
            "left for the policy to drop"
        );
    }

    #[test]
    fn only_a_tenant_keyer_sharing_names_keeps_the_name_beside_the_key() {
        let mut event: CanonicalEvent = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "event_id": "6a1f5c2e-9b3d-4e7a-8c10-2f4bd5e6a701",
            "type": "colony.created", "occurred_at": "2026-11-03T10:00:00Z", "runtime": "hive",
            "session_id": "s1", "agent_role": "queen", "native_type": "colony_created",
            "data": {"colony_name": "billing_refactor"}
        }))
        .unwrap();
        let mut keys_only = event.clone();
        let mut device = event.clone();
        key_colony_name(&mut event, Some(&tenant(T1).sharing_names(true)));
        assert_eq!(event.data_str(NAME_FIELD), Some("billing_refactor"));
        assert_eq!(
            event.data_str(KEY_FIELD),
            Some(tenant(T1).key_of("billing_refactor").as_str())
        );
        key_colony_name(&mut keys_only, Some(&tenant(T1).sharing_names(false)));
        assert_eq!(keys_only.data_str(NAME_FIELD), None);
        let device_keyer = ColonyKeyer::from_hex(T1, KeyScope::Device)
            .unwrap()
            .sharing_names(true);
        assert!(
            !device_keyer.shares_names(),
            "a device key never shares names"
        );
        key_colony_name(&mut device, Some(&device_keyer));
        assert_eq!(device.data_str(NAME_FIELD), None);
        assert_eq!(ColonyNames::default(), ColonyNames::Keys);
        assert_eq!(
            serde_json::to_value(ColonyNames::Names).unwrap(),
            serde_json::json!("names")
        );
        assert_eq!("keys".parse::<ColonyNames>(), Ok(ColonyNames::Keys));
        assert!("Names".parse::<ColonyNames>().is_err());
    }
}
