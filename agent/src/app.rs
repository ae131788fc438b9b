//! `apiary-agent run`: wires the outbox, the local API, the Hive log tailer (and, in online mode, the
//! push loop) together and runs them until the shutdown token is cancelled.
//!
//! Start-up order: policy → the token's identity, when sync is on (`GET /v1/whoami`, 3 s budget, see
//! [`crate::identity`]) → outbox (migrated; the data directory made private) → token files and the
//! device key ([`crate::device_key`], created at first start) → bind the listener (so `DIR/agent.addr`, which
//! tells the CLI where the running agent listens, is written only once the port is known). Shutdown
//! order: stop accepting requests and let the ones in flight finish (bounded by [`SHUTDOWN_GRACE`]), let
//! the push loop finish the batches in flight (bounded by `push.shutdown_grace_ms`), stop the tailer
//! between two commits, then close the outbox (the writer commits what is queued and exits).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use apiary_schema::hive::Zone;
use apiary_schema::Policy;
use tokio_util::sync::CancellationToken;

use crate::config::{Mode, Settings};
use crate::http::{self, AppState};
use crate::outbox::Outbox;

/// How often the Hive home is scanned for runtime liveness ([`crate::tail::runtime`]).
pub const RUNTIME_SCAN_INTERVAL: Duration = Duration::from_secs(2);

/// How long in-flight requests may take to finish after shutdown was asked for.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A built, bound agent.
pub struct Application {
    settings: Settings,
    data_dir: PathBuf,
    outbox: Outbox,
    listener: tokio::net::TcpListener,
    /// The OTLP receiver's listener; `None` when `otlp.enabled = false` or its address was taken.
    otlp: Option<tokio::net::TcpListener>,
    state: AppState,
    /// The device signing key, registered with the ingest while online ([`crate::device_key`]).
    device_key: apiary_schema::device_key::SigningKey,
}

/// The redaction policy in force: the shipped default, narrowed by `policy_file` if set.
pub fn load_policy(settings: &Settings) -> anyhow::Result<Policy> {
    let default = Policy::default_policy();
    match &settings.policy_file {
        None => Ok(default),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading policy_file {}", path.display()))?;
            Policy::load_user(&text, &default)
                .with_context(|| format!("loading policy_file {}", path.display()))
        }
    }
}

/// Opens the outbox of `data_dir` with `settings`.
pub fn open_outbox(
    data_dir: &Path,
    settings: &Settings,
    policy: &Policy,
) -> anyhow::Result<Outbox> {
    open_outbox_as(data_dir, settings, policy, settings.identity.clone())
}

/// Opens the outbox of `data_dir` with `identity` as the identity defaults (configured, or reconciled
/// with the token's, see [`crate::identity`]).
pub fn open_outbox_as(
    data_dir: &Path,
    settings: &Settings,
    policy: &Policy,
    identity: crate::identity::IdentityDefaults,
) -> anyhow::Result<Outbox> {
    Outbox::open(
        &data_dir.join("outbox.db"),
        settings.outbox.clone(),
        identity,
        policy,
    )
    .context("opening the outbox")
}

impl Application {
    /// Opens everything and binds the listener.
    pub async fn build(data_dir: &Path, settings: Settings) -> anyhow::Result<Application> {
        let policy = Arc::new(load_policy(&settings)?);
        let zone: Zone = settings
            .zone
            .parse()
            .map_err(|e: String| anyhow::anyhow!(e))?;
        let check = crate::push::whoami::check_at_start(
            data_dir,
            &settings.identity,
            settings.mode == crate::config::Mode::Airgapped,
        )
        .await;
        let outbox = open_outbox_as(data_dir, &settings, &policy, check.identity.clone())?;
        check.apply(&outbox).await?;
        let token = http::load_or_create_token(data_dir)
            .with_context(|| format!("creating {}", data_dir.join("agent.token").display()))?;
        let settings_token = http::load_or_create_settings_token(data_dir)
            .with_context(|| format!("creating {}", data_dir.join("settings.token").display()))?;
        let device_key = crate::device_key::load_or_create(data_dir)
            .context("loading the device signing key")?;
        // Before agent.addr: that file says the agent is up, and tests read otlp.addr once it exists.
        let otlp = bind_otlp(data_dir, &settings).await?;
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("binding the local API to {}", settings.listen))?;
        let addr = listener.local_addr()?;
        // Written to an exclusive temporary file and renamed, so a reader never sees a half-written
        // address and nothing planted in the directory is followed.
        crate::private::write_atomic(&data_dir.join("agent.addr"), addr.to_string().as_bytes())
            .context("writing agent.addr")?;
        let state = AppState {
            outbox: outbox.clone(),
            token: Arc::new(token),
            settings_token: Arc::new(settings_token),
            policy,
            zone,
            intake: settings.intake.clone(),
            body_budget: Arc::new(crate::http::budget::BodyBudget::new(
                settings.intake.max_bytes_in_flight,
            )),
            mode: settings.mode,
            started_at: std::time::Instant::now(),
            stats: Arc::default(),
            runtimes: crate::tail::runtime::RuntimeWatch::new(),
            streams: Arc::default(),
            addr,
            page_sessions: Arc::default(),
            exports: Arc::default(),
            identity: Arc::new(settings.identity.clone()),
            hive_home: settings.hive_home.clone(),
        };
        tracing::info!(%addr, mode = ?settings.mode, device_id = %outbox.device_id(),
            policy_hash = outbox.policy_hash(), "apiary-agent started");
        Ok(Application {
            settings,
            data_dir: data_dir.to_path_buf(),
            outbox,
            listener,
            otlp,
            state,
            device_key,
        })
    }

    /// The bound OTLP receiver address, if it runs.
    pub fn otlp_addr(&self) -> Option<SocketAddr> {
        self.otlp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound local API address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// Runs until `shutdown` is cancelled, then shuts down in order (see the module notes).
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let Application {
            settings,
            data_dir,
            outbox,
            listener,
            otlp,
            state,
            device_key,
        } = self;
        let liveness = settings.hive_home.clone().map(|home| {
            let o = outbox.clone();
            let on_gone: crate::tail::runtime::OnGone = Box::new(move |gone| {
                let o = o.clone();
                tokio::spawn(async move {
                    if let Err(e) = o.stream_runtime_gone(gone).await {
                        tracing::warn!(error = %e.detailed(), "streaming a crashed runtime failed");
                    }
                });
            });
            tokio::spawn(crate::tail::runtime::run_until_stopped(
                home,
                state.runtimes.clone(),
                RUNTIME_SCAN_INTERVAL,
                on_gone,
                shutdown.clone(),
            ))
        });
        let tail = settings.hive_home.clone().map(|home| {
            let mut tail_settings = crate::tail::TailSettings::new(home, state.policy.clone());
            tail_settings.zone = state.zone;
            tail_settings.max_line_bytes = settings.intake.max_line_bytes;
            tail_settings.colony = Some(Arc::new(outbox.colony_keys()));
            let sink = Arc::new(outbox.clone());
            tokio::spawn(crate::tail::run_until_stopped(
                tail_settings,
                sink,
                shutdown.clone(),
            ))
        });
        let push = match settings.mode {
            Mode::Airgapped => {
                tracing::info!("air-gapped: no connection to the ingest is ever opened");
                None
            }
            Mode::Online => {
                tracing::info!("online: pushes run while sync is enabled");
                tokio::spawn(crate::push::register_key::run_until_stopped(
                    outbox.clone(),
                    device_key,
                    shutdown.clone(),
                ));
                let pusher = crate::push::Pusher::new(outbox.clone(), settings.push.clone())
                    .context("starting the push loop")?
                    .with_identity(settings.identity.clone())
                    .with_runtimes(state.runtimes.clone());
                Some(tokio::spawn(
                    Arc::new(pusher).run_until_stopped(shutdown.clone()),
                ))
            }
        };
        let otlp_served = otlp.map(|l| {
            let stop = shutdown.clone();
            let server = axum::serve(l, crate::otlp::router(state.clone()))
                .with_graceful_shutdown(async move { stop.cancelled().await });
            tokio::spawn(async move { server.await })
        });
        let streams = state.streams.clone();
        let app = http::router(state);
        let stop = shutdown.clone();
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            stop.cancelled().await;
        });
        let served = tokio::spawn(async move { server.await });
        shutdown.cancelled().await;
        tracing::info!("shutting down");
        streams.stop();
        match tokio::time::timeout(SHUTDOWN_GRACE, served).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "local API stopped with an error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "local API task failed"),
            Err(_) => {
                tracing::warn!("requests still in flight after the grace period; leaving them")
            }
        }
        if let Some(served) = otlp_served {
            if !matches!(
                tokio::time::timeout(SHUTDOWN_GRACE, served).await,
                Ok(Ok(Ok(())))
            ) {
                tracing::warn!("the OTLP receiver did not stop cleanly within the grace period");
            }
        }
        if let Some(push) = push {
            // The push loop gives batches in flight `push.shutdown_grace_ms` itself.
            let grace =
                Duration::from_millis(settings.push.shutdown_grace_ms) + Duration::from_secs(1);
            if tokio::time::timeout(grace, push).await.is_err() {
                tracing::warn!("push loop did not stop in time");
            }
        }
        if let Some(liveness) = liveness {
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, liveness).await;
        }
        if let Some(tail) = tail {
            match tokio::time::timeout(SHUTDOWN_GRACE, tail).await {
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "tailer stopped with an error"),
                Ok(Err(e)) => tracing::warn!(error = %e, "tailer task failed"),
                _ => {}
            }
        }
        outbox.close().await;
        let _ = std::fs::remove_file(data_dir.join("agent.addr"));
        let _ = std::fs::remove_file(data_dir.join("otlp.addr"));
        tracing::info!("stopped");
        Ok(())
    }
}

/// Binds the OTLP receiver when enabled and writes `DIR/otlp.addr`. Its address being taken is not fatal:
/// 4318 is every OTLP collector's port, and Hive intake must not stop because one runs on the same host;
/// the agent says so in its log and runs without the receiver.
async fn bind_otlp(
    data_dir: &Path,
    settings: &Settings,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let _ = std::fs::remove_file(data_dir.join("otlp.addr"));
    if !settings.otlp.enabled {
        return Ok(None);
    }
    match tokio::net::TcpListener::bind(settings.otlp.listen).await {
        Ok(l) => {
            let addr = l.local_addr()?;
            crate::otlp::write_addr(data_dir, addr).context("writing otlp.addr")?;
            tracing::info!(%addr, "OTLP receiver listening (/v1/traces, /v1/logs, /v1/metrics)");
            Ok(Some(l))
        }
        Err(e) => {
            tracing::warn!(addr = %settings.otlp.listen, error = %e,
                "the OTLP receiver cannot listen (another collector on this port?); running without it: \
                 set otlp.listen to a free address or otlp.enabled = false");
            Ok(None)
        }
    }
}

/// A token cancelled on SIGTERM or Ctrl-C; on Windows, on Ctrl-C, Ctrl-Break, console close, logoff
/// and shutdown ([`crate::platform::windows::shutdown_requested`]).
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    #[cfg(windows)]
    if let Err(e) = crate::platform::windows::shutdown_requested(token.clone()) {
        tracing::warn!(error = %e, "cannot install the console control handler; Ctrl-C only");
    } else {
        return token;
    }
    let t = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("installing the SIGTERM handler");
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        t.cancel();
    });
    token
}
