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
//! The keyer in force is shared ([`ColonyKeys`]) by the intake, the tailer and the push loop; a change
//! applies to events processed after it. The name itself is never stored.

use std::sync::{Arc, RwLock};

use apiary_schema::colony::{ColonyKeyer, KeyScope, SECRET_BYTES};
use rusqlite::Connection;

use super::store;

/// Meta key of the tenant's secret (`<tenant_id>:<hex>`).
pub(super) const TENANT_SECRET_KEY: &str = "colony_secret";
/// Meta key of this device's own secret (hex).
const DEVICE_SECRET_KEY: &str = "colony_device_secret";

/// The keyer in force and the tenant whose secret it is (None: the device's own).
#[derive(Debug, Clone)]
struct Current {
    keyer: ColonyKeyer,
    tenant: Option<String>,
    /// The stored tenant secret (hex), to tell a repeat from a change.
    secret: Option<String>,
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
    /// The keyer in force now.
    pub fn keyer(&self) -> ColonyKeyer {
        self.0.read().expect("colony keys lock").keyer.clone()
    }

    /// True when keys are the tenant's (`ck_`), false while they are this device's own (`dk_`).
    pub fn is_tenant(&self) -> bool {
        self.keyer().scope() == KeyScope::Tenant
    }

    /// Decides about `secret` of `tenant` and, unless refused, puts it in force; the caller stores
    /// [`Adoption::Store`]'s value under [`TENANT_SECRET_KEY`].
    pub(super) fn adopt(&self, tenant: &str, secret: &str) -> Adoption {
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
        };
        Adoption::Store(format!("{tenant}:{secret}"))
    }
}

/// The keys stored in the outbox `conn`: the tenant's secret if stored, else the device's own (created
/// and stored on first use).
pub(super) fn load(conn: &Connection) -> rusqlite::Result<ColonyKeys> {
    if let Some(stored) = store::get_meta(conn, TENANT_SECRET_KEY)? {
        if let Some((tenant, secret)) = stored.rsplit_once(':') {
            if let Ok(keyer) = ColonyKeyer::from_hex(secret, KeyScope::Tenant) {
                return Ok(ColonyKeys(Arc::new(RwLock::new(Current {
                    keyer,
                    tenant: Some(tenant.to_string()),
                    secret: Some(secret.to_string()),
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
}
