//! `apiary-ingest device register|revoke|keys`: an admin's hand on device signing keys (the rules are
//! in [`crate::store::device_keys`]).
//!
//! - `register --tenant T --user U --device D --public-key KEY [--replace]`: for an air-gapped device,
//!   whose key the admin reads off the device (`apiary-agent identity show`). Registering binds the
//!   device to the user, like a token made with `--device`: other users' unbound rows of that device are
//!   removed and their senders refused from then on ([`crate::store::device_owners`]). Prints the key
//!   as JSON; its fingerprint alone on the last line.
//! - `revoke --tenant T (--fingerprint F | --device D)`: the key stops vouching for bundles at once,
//!   for every import from then on, whatever a bundle's date.
//! - `keys --tenant T`: every key of the tenant, revoked ones included, as JSON.

use anyhow::Context;
use apiary_schema::device_key::PublicKey;
use clap::Subcommand;
use sqlx::PgPool;

use crate::store::{admin, device_keys, device_owners};

#[derive(Debug, Subcommand)]
pub enum DeviceAction {
    /// Register a device's signing key (Ed25519, as `apiary-agent identity show` prints it); prints the
    /// key as JSON and its fingerprint on the last line.
    Register {
        /// Tenant id (or unique name).
        #[arg(long)]
        tenant: String,
        /// The device's user: its bundles' events are this user's.
        #[arg(long)]
        user: String,
        #[arg(long)]
        device: String,
        /// `ed25519:BASE64` (or the bare base64).
        #[arg(long)]
        public_key: String,
        /// Revoke the device's current key and register this one (key rotation).
        #[arg(long)]
        replace: bool,
    },
    /// Revoke a device key (by fingerprint, or the device's active key): bundles it sealed are refused
    /// from now on, whatever their date.
    Revoke {
        #[arg(long)]
        tenant: String,
        #[arg(long, conflicts_with = "device", required_unless_present = "device")]
        fingerprint: Option<String>,
        #[arg(long)]
        device: Option<String>,
    },
    /// Print the tenant's device keys (revoked ones included) as JSON.
    Keys {
        #[arg(long)]
        tenant: String,
    },
}

/// Runs a `device` command.
pub async fn run(pool: &PgPool, action: DeviceAction) -> anyhow::Result<()> {
    match action {
        DeviceAction::Register {
            tenant,
            user,
            device,
            public_key,
            replace,
        } => {
            for (what, id) in [("--user", &user), ("--device", &device)] {
                anyhow::ensure!(
                    apiary_schema::policy::is_id(id),
                    "{what} {id:?} is not a valid id"
                );
            }
            let key = PublicKey::parse(&public_key)?;
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let done = device_keys::register(
                pool,
                tenant_id,
                Some(&user),
                &device,
                &key,
                device_keys::RegisteredBy::Admin,
                replace,
            )
            .await?;
            let claimed = device_owners::claim(pool, tenant_id, &device, Some(&user))
                .await
                .context("claiming the device for its user")?;
            let key = match done {
                device_keys::Registered::New { key, replaced } => {
                    match replaced {
                        Some(old) => apiary_plumbing::errln!(
                            "registered {} for device {device:?} of user {user:?}; revoked {old}",
                            key.fingerprint
                        ),
                        None => apiary_plumbing::errln!(
                            "registered {} for device {device:?} of user {user:?}",
                            key.fingerprint
                        ),
                    }
                    key
                }
                device_keys::Registered::Already(key) => {
                    apiary_plumbing::errln!(
                        "device {device:?} already has this key: nothing changed"
                    );
                    key
                }
            };
            if !claimed.users.is_empty() {
                apiary_plumbing::errln!(
                    "removed the rows other users' tokens had made under device {device:?} (users {:?})",
                    claimed.users
                );
            }
            apiary_plumbing::errln!("{}", serde_json::to_string_pretty(&key)?);
            apiary_plumbing::outln!("{}", key.fingerprint)?;
        }
        DeviceAction::Revoke {
            tenant,
            fingerprint,
            device,
        } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let which = match (fingerprint, device) {
                (Some(f), _) => device_keys::KeyRef::Fingerprint(f),
                (None, Some(d)) => device_keys::KeyRef::Device(d),
                (None, None) => anyhow::bail!("give --fingerprint or --device"),
            };
            let key = device_keys::revoke(pool, tenant_id, &which)
                .await
                .with_context(|| format!("revoking {which:?}"))?;
            apiary_plumbing::errln!(
                "revoked {} of device {:?}: bundles it sealed are refused from now on",
                key.fingerprint,
                key.device_id
            );
            apiary_plumbing::outln!("{}", serde_json::to_string(&key)?)?;
        }
        DeviceAction::Keys { tenant } => {
            let tenant_id = admin::resolve_tenant(pool, &tenant).await?;
            let keys = device_keys::list(pool, tenant_id).await?;
            apiary_plumbing::outln!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "keys": keys }))?
            )?;
        }
    }
    Ok(())
}
