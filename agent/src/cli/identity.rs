//! `apiary-agent identity show --data-dir DIR [--json]`: this device's id and signing key — the public
//! key and its fingerprint an admin registers for an air-gapped device (`apiary-ingest device register
//! … --public-key`), and compares with what the ingest lists (`device keys`).

use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::{settings, Common};
use crate::config::{LogFormat, Overrides};
use crate::outbox::OutboxReader;
use crate::telemetry;

/// What `identity show` prints.
#[derive(Debug, Serialize)]
struct Shown {
    /// The device id (configured, or the one the outbox generated or adopted); None before first start.
    device_id: Option<String>,
    /// The default user of this device's sessions, when configured.
    user_id: Option<String>,
    public_key: String,
    fingerprint: String,
    key_file: String,
}

pub async fn show(common: &Common, json: bool) -> anyhow::Result<ExitCode> {
    telemetry::init(LogFormat::Text, "warn");
    let settings = settings(common, &Overrides::default())?;
    let key = crate::device_key::load(&common.data_dir)?;
    let db = common.data_dir.join("outbox.db");
    let stored = if db.exists() {
        OutboxReader::open(&db)
            .and_then(|r| r.stored_status())
            .context("reading the outbox")?
            .device_id
    } else {
        None
    };
    let public = key.public();
    let shown = Shown {
        device_id: settings.identity.device_id.clone().or(stored),
        user_id: settings.identity.user_id.clone(),
        public_key: public.to_text(),
        fingerprint: public.fingerprint(),
        key_file: crate::device_key::path(&common.data_dir)
            .display()
            .to_string(),
    };
    if json {
        apiary_plumbing::outln!("{}", serde_json::to_string_pretty(&shown)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let device = shown
        .device_id
        .as_deref()
        .unwrap_or("(chosen at first start)");
    apiary_plumbing::outln!("device:      {device}")?;
    apiary_plumbing::outln!("public key:  {}", shown.public_key)?;
    apiary_plumbing::outln!("fingerprint: {}", shown.fingerprint)?;
    apiary_plumbing::outln!("key file:    {}", shown.key_file)?;
    apiary_plumbing::outln!(
        "an admin registers it for an air-gapped device with:\n  apiary-ingest device register --tenant T --user {} --device {device} --public-key {}",
        shown.user_id.as_deref().unwrap_or("U"),
        shown.public_key
    )?;
    Ok(ExitCode::SUCCESS)
}
