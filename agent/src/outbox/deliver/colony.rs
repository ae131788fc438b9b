//! The colony secret this device derives colony keys with ([`apiary_schema::colony`]), kept in the
//! outbox's `meta` table so it survives restarts.
//!
//! - `colony_secret` = `<tenant_id>:<64 hex digits>`: the tenant's secret, from `GET /v1/whoami` (at
//!   `sync enable`, at start with sync on, and when the push loop first finds sync on). Once stored for a
//!   tenant it is never replaced by another secret of the same tenant (the ingest never changes it; a
//!   different answer is logged and ignored), so a colony's key never changes once synced. A token of
//!   another tenant brings that tenant's secret, which replaces it.
//! - `colony_device_secret` = 64 hex digits, generated at first open: used while no tenant secret is
//!   known (sync never enabled, the ingest not reached yet, air-gapped). Its `dk_` keys are stable on this
//!   device and cannot be linked to the same name on any other device.
//!
//! - `colony_names_tenant` = `keys` | `names`: the tenant's choice for colony names, as `GET /v1/whoami`
//!   last told it (at `sync enable`, at start, when the push loop fetched the secret, when the settings
//!   page checked the server). Absent: `keys`.
//! - `colony_names_consent` = `keys` | `names`: what the user agreed to when sharing was last turned on:
//!   `names` when the tenant's choice was `names` then (and the user did not decline it on the settings
//!   page: `colony_names_declined` = `1`), else `keys`. The consent's policy hash records it too: the
//!   hash of the policy widened by `colony_name` (`Policy::with_colony_names`).
//!
//! Names leave the device only while both say `names` and the keys are the tenant's
//! ([`ColonyKeys::shares_names`]): the keyer in force then keeps each colony's name beside its key, and
//! the pipeline's policy lets it pass. A tenant going back to `keys` stops it at the next answer that
//! tells it; a tenant choosing `names` after the consent needs the user to turn sharing on again.
//!
//! The keyer in force is shared ([`ColonyKeys`]) by the intake, the tailer and the push loop; a change
//! applies to events processed after it. The name itself is never stored.

use std::sync::{Arc, RwLock};

use apiary_schema::colony::{ColonyKeyer, ColonyNames, KeyScope, SECRET_BYTES};
use rusqlite::Connection;

use crate::outbox::write::store;

/// Meta key of the tenant's secret (`<tenant_id>:<hex>`).
pub(in crate::outbox) const TENANT_SECRET_KEY: &str = "colony_secret";
/// Meta key of this device's own secret (hex).
const DEVICE_SECRET_KEY: &str = "colony_device_secret";
/// Meta key of the tenant's colony names choice, as last told.
pub(in crate::outbox) const TENANT_NAMES_KEY: &str = "colony_names_tenant";
/// Meta key of the colony names choice the consent in force agreed to.
pub(in crate::outbox) const CONSENT_NAMES_KEY: &str = "colony_names_consent";
/// Meta key of the user's "keys only, please" from the settings page (`1`), applied at the next consent.
pub(in crate::outbox) const DECLINED_KEY: &str = "colony_names_declined";

/// The keyer in force and the tenant whose secret it is (None: the device's own).
#[derive(Debug, Clone)]
struct Current {
    keyer: ColonyKeyer,
    tenant: Option<String>,
    /// The stored tenant secret (hex), to tell a repeat from a change.
    secret: Option<String>,
    /// What the colony names settings say (see the module notes).
    names: Names,
}

/// The three colony names settings (see the module notes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Names {
    /// The tenant's choice, as last told.
    pub tenant: ColonyNames,
    /// What the consent in force agreed to.
    pub consent: ColonyNames,
    /// The user asked for keys only at the next consent.
    pub declined: bool,
}

impl Names {
    /// Names travel: the tenant wants them and the consent in force agreed.
    pub fn in_effect(self) -> bool {
        self.tenant == ColonyNames::Names && self.consent == ColonyNames::Names
    }

    /// What turning sharing on now would agree to.
    pub fn at_consent(self) -> ColonyNames {
        match (self.tenant, self.declined) {
            (ColonyNames::Names, false) => ColonyNames::Names,
            _ => ColonyNames::Keys,
        }
    }
}

/// The colony keyer in force, shared by everything that processes events. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ColonyKeys(Arc<RwLock<Current>>);

/// What [`ColonyKeys::adopt`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adoption {
    /// The secret is new (first, or another tenant's): store it.
    Store(String),
    /// Already in force.
    Same,
    /// Refused: a different secret for the tenant already stored, or not a secret at all.
    Refused(&'static str),
}

impl ColonyKeys {
    /// The keyer in force now (keeping names beside keys while [`Names::in_effect`]).
    pub fn keyer(&self) -> ColonyKeyer {
        let cur = self.0.read().expect("colony keys lock");
        cur.keyer.clone().sharing_names(cur.names.in_effect())
    }

    /// The colony names settings now.
    pub fn names(&self) -> Names {
        self.0.read().expect("colony keys lock").names
    }

    /// True while colony names leave the device (see the module notes).
    pub fn shares_names(&self) -> bool {
        self.keyer().shares_names()
    }

    /// Changes the names settings with `change`; returns the new ones.
    pub(in crate::outbox) fn set_names(&self, change: impl FnOnce(&mut Names)) -> Names {
        let mut cur = self.0.write().expect("colony keys lock");
        change(&mut cur.names);
        cur.names
    }

    /// True when keys are the tenant's (`ck_`), false while they are this device's own (`dk_`).
    pub fn is_tenant(&self) -> bool {
        self.keyer().scope() == KeyScope::Tenant
    }

    /// Decides about `secret` of `tenant` and, unless refused, puts it in force; the caller stores
    /// [`Adoption::Store`]'s value under [`TENANT_SECRET_KEY`].
    pub(in crate::outbox) fn adopt(&self, tenant: &str, secret: &str) -> Adoption {
        let Ok(keyer) = ColonyKeyer::from_hex(secret, KeyScope::Tenant) else {
            return Adoption::Refused("the ingest's colony secret is not 64 hex digits");
        };
        let secret = secret.trim().to_ascii_lowercase();
        let mut cur = self.0.write().expect("colony keys lock");
        if cur.tenant.as_deref() == Some(tenant) {
            return match cur.secret.as_deref() == Some(secret.as_str()) {
                true => Adoption::Same,
                false => Adoption::Refused(
                    "the ingest answered another colony secret for this tenant than the one stored; \
                     keeping the stored one so that colony keys do not change",
                ),
            };
        }
        *cur = Current {
            keyer,
            tenant: Some(tenant.to_string()),
            secret: Some(secret.clone()),
            names: cur.names,
        };
        Adoption::Store(format!("{tenant}:{secret}"))
    }
}

/// The keys stored in the outbox `conn`: the tenant's secret if stored, else the device's own (created
/// and stored on first use).
pub(in crate::outbox) fn load(conn: &Connection) -> rusqlite::Result<ColonyKeys> {
    let choice = |key| -> rusqlite::Result<ColonyNames> {
        Ok(store::get_meta(conn, key)?
            .and_then(|v| ColonyNames::parse(&v))
            .unwrap_or_default())
    };
    let names = Names {
        tenant: choice(TENANT_NAMES_KEY)?,
        consent: choice(CONSENT_NAMES_KEY)?,
        declined: store::get_meta(conn, DECLINED_KEY)?.as_deref() == Some("1"),
    };
    if let Some(stored) = store::get_meta(conn, TENANT_SECRET_KEY)? {
        if let Some((tenant, secret)) = stored.rsplit_once(':') {
            if let Ok(keyer) = ColonyKeyer::from_hex(secret, KeyScope::Tenant) {
                return Ok(ColonyKeys(Arc::new(RwLock::new(Current {
                    keyer,
                    tenant: Some(tenant.to_string()),
                    secret: Some(secret.to_string()),
                    names,
                }))));
            }
        }
        tracing::warn!("the stored colony secret is unreadable; using this device's own until the ingest is asked again");
    }
    let device = match store::get_meta(conn, DEVICE_SECRET_KEY)? {
        Some(hex) if ColonyKeyer::from_hex(&hex, KeyScope::Device).is_ok() => hex,
        _ => {
            use rand::RngCore;
            let mut bytes = [0u8; SECRET_BYTES];
            rand::rngs::OsRng.fill_bytes(&mut bytes);
            let hex = hex::encode(bytes);
            store::set_meta(conn, DEVICE_SECRET_KEY, &hex)?;
            hex
        }
    };
    let keyer = ColonyKeyer::from_hex(&device, KeyScope::Device).expect("checked above");
    Ok(ColonyKeys(Arc::new(RwLock::new(Current {
        keyer,
        tenant: None,
        secret: None,
        names,
    }))))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const S2: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

    fn conn() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            .unwrap();
        c
    }

    #[test]
    fn a_device_secret_is_made_once_and_kept() {
        let c = conn();
        let a = load(&c).unwrap();
        assert!(!a.is_tenant());
        let b = load(&c).unwrap();
        assert_eq!(a.keyer().key_of("x"), b.keyer().key_of("x"));
        assert!(a.keyer().key_of("x").starts_with("dk_"));
    }

    #[test]
    fn a_tenant_secret_replaces_the_device_s_and_is_never_changed_for_that_tenant() {
        let c = conn();
        let keys = load(&c).unwrap();
        let Adoption::Store(v) = keys.adopt("t1", S1) else {
            panic!("first secret refused")
        };
        store::set_meta(&c, TENANT_SECRET_KEY, &v).unwrap();
        assert!(keys.is_tenant());
        let k1 = keys.keyer().key_of("billing");
        assert_eq!(keys.adopt("t1", S1), Adoption::Same);
        assert!(matches!(keys.adopt("t1", S2), Adoption::Refused(_)));
        assert_eq!(keys.keyer().key_of("billing"), k1, "a key never changes");
        assert_eq!(
            load(&c).unwrap().keyer().key_of("billing"),
            k1,
            "after a restart"
        );
        assert!(matches!(keys.adopt("t1", "zz"), Adoption::Refused(_)));
        assert!(
            matches!(keys.adopt("t2", S2), Adoption::Store(_)),
            "another tenant's"
        );
        assert_ne!(keys.keyer().key_of("billing"), k1);
    }

    #[test]
    fn names_travel_only_while_the_tenant_wants_them_and_the_consent_agreed() {
        let c = conn();
        let keys = load(&c).unwrap();
        keys.set_names(|n| n.tenant = ColonyNames::Names);
        assert!(!keys.shares_names(), "no consent yet, and device keys");
        assert_eq!(keys.names().at_consent(), ColonyNames::Names);
        keys.set_names(|n| n.consent = ColonyNames::Names);
        assert!(!keys.shares_names(), "device keys never share names");
        let Adoption::Store(v) = keys.adopt("t1", S1) else {
            panic!("refused")
        };
        store::set_meta(&c, TENANT_SECRET_KEY, &v).unwrap();
        assert!(keys.shares_names());
        assert!(keys.keyer().shares_names());
        keys.set_names(|n| n.tenant = ColonyNames::Keys);
        assert!(!keys.shares_names(), "the tenant went back to keys");
        keys.set_names(|n| n.tenant = ColonyNames::Names);
        assert!(keys.shares_names(), "the consent still agrees");
        keys.set_names(|n| n.declined = true);
        assert_eq!(keys.names().at_consent(), ColonyNames::Keys);
        // Kept across a restart.
        store::set_meta(&c, TENANT_NAMES_KEY, "names").unwrap();
        store::set_meta(&c, CONSENT_NAMES_KEY, "names").unwrap();
        assert!(load(&c).unwrap().shares_names());
        store::set_meta(&c, CONSENT_NAMES_KEY, "keys").unwrap();
        assert!(!load(&c).unwrap().shares_names());
    }
}
