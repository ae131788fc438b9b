//! The command line. Every subcommand takes `--data-dir` (or `APIARY_DATA_DIR`; default: the platform's
//! data directory, [`crate::platform::default_data_dir`]) and `--config`.
//!
//! Subcommands other than `run` work on the outbox file directly (SQLite serialises them with a running
//! agent; the running agent re-reads the sync switch at every commit), so they work whether or not the
//! agent is running. `status` also asks the running agent (via `DIR/agent.addr` and `DIR/agent.token`)
//! for its live health when it can.

mod commands;
mod doctor;
pub mod doctor_problems;
mod explain;
mod identity;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{Mode, Overrides, Settings};

/// apiary-agent — on-device telemetry sidecar: intake, redaction, durable outbox, push.
#[derive(Debug, Parser)]
#[command(name = "apiary-agent", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// The agent's data directory (outbox.db, agent.token, agent.toml). Default: %LOCALAPPDATA%\Apiary
    /// on Windows, ~/Library/Application Support/Apiary on macOS, $XDG_DATA_HOME/apiary or
    /// ~/.local/share/apiary elsewhere.
    #[arg(long, env = "APIARY_DATA_DIR", value_name = "DIR",
        default_value_os_t = crate::platform::default_data_dir().unwrap_or_default())]
    pub data_dir: PathBuf,
    /// Config file (default: DIR/agent.toml if it exists). Keys can be overridden by APIARY_* variables.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent: local API, Hive log tailing, outbox (and pushes when sync is on).
    Run {
        #[command(flatten)]
        common: Common,
        /// Local API address (loopback only); overrides `listen`.
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// Follow Hive's logs under this directory; overrides `hive_home`.
        #[arg(long, value_name = "DIR")]
        hive_home: Option<PathBuf>,
        /// online or airgapped; overrides `mode`.
        #[arg(long, value_parser = parse_mode)]
        mode: Option<Mode>,
        /// OTLP/HTTP receiver address (loopback only); overrides `otlp.listen`.
        #[arg(long, value_name = "ADDR")]
        otlp_listen: Option<SocketAddr>,
        /// Append the log to FILE (private to the user) instead of standard error: for an agent started
        /// at login with no terminal (the Windows logon task writes DIR\agent.log).
        #[arg(long, value_name = "FILE")]
        log_file: Option<PathBuf>,
    },
    /// Check configuration, consent, token, endpoint, identity and Hive home; one line per check with
    /// the fix; exit status 1 when something is wrong.
    Doctor {
        #[command(flatten)]
        common: Common,
    },
    /// Show sync state, counts by outcome, backlog, health, and the budgets the ingest last reported.
    Status {
        #[command(flatten)]
        common: Common,
        /// Print JSON instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Turn uploading on or off (consent).
    Sync {
        #[command(subcommand)]
        action: SyncAction,
    },
    /// Write every pending event to a bundle file for `apiary-ingest import` and mark them exported.
    Export {
        #[command(flatten)]
        common: Common,
        /// The bundle to write (gzip NDJSON: a manifest line, then one canonical event per line).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// This device's identity: its id, and its signing key's public key and fingerprint.
    Identity {
        #[command(subcommand)]
        action: IdentityAction,
    },
    /// Stream committed events as they arrive, like `tail -f`.
    Follow {
        #[command(flatten)]
        common: Common,
        /// Only this session.
        #[arg(long, value_name = "S")]
        session: Option<String>,
        /// Only this canonical type (e.g. llm.turn).
        #[arg(long = "type", value_name = "T")]
        kind: Option<String>,
        /// Start from the first event still in the outbox instead of the last 10.
        #[arg(long)]
        from_start: bool,
    },
    /// Redaction policy tools.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Stop the agent running on the data directory (its ordered shutdown, as on Ctrl-C) and wait for it.
    #[cfg(windows)]
    Stop {
        #[command(flatten)]
        common: Common,
        /// How long to wait for the agent to finish, in seconds.
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        wait: u64,
    },
}

impl Command {
    /// The options every subcommand takes (none for `policy explain`, which has its own).
    fn common(&self) -> Option<&Common> {
        match self {
            Command::Run { common, .. }
            | Command::Doctor { common }
            | Command::Status { common, .. }
            | Command::Export { common, .. }
            | Command::Follow { common, .. }
            | Command::Identity {
                action: IdentityAction::Show { common, .. },
            }
            | Command::Sync {
                action: SyncAction::Enable { common, .. } | SyncAction::Disable { common, .. },
            } => Some(common),
            #[cfg(windows)]
            Command::Stop { common, .. } => Some(common),
            Command::Policy { .. } => None,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum SyncAction {
    /// Enable uploads (records consent with the time and the policy hash).
    Enable {
        #[command(flatten)]
        common: Common,
        /// The ingest's base URL, e.g. https://apiary.example.com
        #[arg(long, value_name = "URL")]
        endpoint: String,
        /// A file holding the ingest token (the token itself is never stored by the agent).
        #[arg(long, value_name = "F")]
        token_file: PathBuf,
        /// Also upload the events captured while sync was off.
        #[arg(long)]
        include_backlog: bool,
        /// Store the endpoint and token file even though the ingest refused them (401, 403, 404):
        /// sharing stays paused until the ingest accepts the token.
        #[arg(long)]
        force: bool,
    },
    /// Disable uploads at once.
    Disable {
        #[command(flatten)]
        common: Common,
        /// Also delete every pending event.
        #[arg(long)]
        purge: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum IdentityAction {
    /// Print the device id, and the public key and fingerprint of the key that seals its exports (what
    /// an admin registers with `apiary-ingest device register --public-key`).
    Show {
        #[command(flatten)]
        common: Common,
        /// Print JSON instead of a listing.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// For each native event in FILE (NDJSON), show what the policy keeps and what it drops.
    Explain {
        /// An NDJSON file of Hive-native or canonical events (`-` for stdin).
        file: PathBuf,
        /// One JSON object per line instead of a listing.
        #[arg(long)]
        json: bool,
        /// Zone of naive timestamps (local, UTC, or an IANA name); default from config.
        #[arg(long, value_name = "Z")]
        zone: Option<String>,
        /// Data directory, to use its config (DIR/agent.toml) for policy_file and zone.
        #[arg(long, env = "APIARY_DATA_DIR", value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Config file (wins over DIR/agent.toml; needs no --data-dir).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "online" => Ok(Mode::Online),
        "airgapped" | "air-gapped" => Ok(Mode::Airgapped),
        _ => Err("expected online or airgapped".into()),
    }
}

/// Loads the layered settings for a subcommand.
pub fn settings(common: &Common, flags: &Overrides) -> anyhow::Result<Settings> {
    Ok(Settings::load(
        &common.data_dir,
        common.config.as_deref(),
        std::env::vars(),
        flags,
    )?)
}

/// Runs one command line to completion.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Some(common) = cli.command.common() {
        anyhow::ensure!(
            !common.data_dir.as_os_str().is_empty(),
            "no data directory: pass --data-dir DIR or set APIARY_DATA_DIR (the default needs {})",
            if cfg!(windows) {
                "LOCALAPPDATA"
            } else {
                "HOME"
            }
        );
    }
    match cli.command {
        Command::Run {
            common,
            listen,
            hive_home,
            mode,
            otlp_listen,
            log_file,
        } => {
            let flags = Overrides {
                listen,
                hive_home,
                mode,
                otlp_listen,
            };
            commands::run(&common, &flags, log_file.as_deref()).await
        }
        Command::Status { common, json } => commands::status(&common, json).await,
        Command::Doctor { common } => doctor::doctor(&common).await,
        Command::Sync { action } => commands::sync(action).await,
        Command::Export { common, out } => commands::export(&common, &out).await,
        Command::Identity {
            action: IdentityAction::Show { common, json },
        } => identity::show(&common, json).await,
        Command::Follow {
            common,
            session,
            kind,
            from_start,
        } => commands::follow(&common, session, kind, from_start).await,
        Command::Policy {
            action:
                PolicyAction::Explain {
                    file,
                    json,
                    zone,
                    data_dir,
                    config,
                },
        } => explain::explain(&file, json, zone, data_dir, config),
        #[cfg(windows)]
        Command::Stop { common, wait } => {
            commands::stop(&common, std::time::Duration::from_secs(wait)).await
        }
    }
}
