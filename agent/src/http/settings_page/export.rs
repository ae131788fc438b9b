//! The "Export bundle" button (`POST /settings/export`), air-gapped mode only: writes every event
//! waiting here into a bundle for `apiary-ingest import`, by the code of `apiary-agent export`
//! ([`crate::outbox::Outbox::export`]: same format, same marking of the rows as `exported`), into
//! `DIR/exports/` (created private, 0700), and shows the file's path and how many events it holds.
//!
//! - **Guarded like the toggle**: signed in, and `Origin` of this agent's own page (the page's CSRF
//!   proof; there is no script to set a header), else 403 and nothing is written.
//! - **Refusals** (409, shown on the page, nothing written): online mode (events leave by sharing
//!   there, and an export would race the push loop; `apiary-agent export` stays available to whoever
//!   wants a bundle anyway), and nothing waiting to be exported.
//! - **Never overwrites**: the file is `apiary-<device>-<UTC time to the millisecond>.ndjson.gz`, and one
//!   export runs at a time (a second click waits); a name that exists is refused.
//!
//! Hooks: `section#export`, `#export-button`, `[data-field=export_path]`, `[data-field=export_events]`.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};

use super::layout::cross_site;
use super::layout::Problem;
use super::page::render;
use super::sections::{events, exports_dir};
use super::signin;
use crate::config::Mode;
use crate::http::{ApiError, AppState};
use crate::outbox::{ExportError, ExportReport};

/// `POST /settings/export`.
pub async fn export(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !super::origin_is_own(&state, &headers) {
        return cross_site();
    }
    if !signin::signed_in(&state, &headers) {
        return Redirect::to("/settings/sign-in").into_response();
    }
    match try_export(&state).await {
        Ok(report) => render(&state, Some(done(&report)), None).await,
        Err(e) => {
            let (status, message) = e.status_and_message();
            let problem = Problem::new(status, message);
            render(&state, None, Some(problem)).await
        }
    }
}

/// Writes the bundle (see the module notes).
async fn try_export(state: &AppState) -> Result<ExportReport, ApiError> {
    if state.mode != Mode::Airgapped {
        return Err(ApiError::Conflict(
            "the export button is for air-gapped mode: online, events leave this device by sharing \
             (apiary-agent export still writes a bundle from the command line)"
                .into(),
        ));
    }
    let _one_at_a_time = state.exports.lock().await;
    let nothing = || ApiError::Conflict("nothing to export: no event waits on this device".into());
    if state.outbox.status().await?.stored.pending_events == 0 {
        return Err(nothing());
    }
    let dir = exports_dir(state.outbox.path());
    crate::private::ensure_dir(&dir).map_err(|e| ApiError::from(ExportError::write(&dir, e)))?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
    let device: String = state
        .outbox
        .device_id()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("apiary-{device}-{stamp}.ndjson.gz"));
    if path.exists() {
        return Err(ApiError::Conflict(format!(
            "{} exists already; try again",
            path.display()
        )));
    }
    let report = state.outbox.export(&path).await?;
    if report.events == 0 {
        // Exported or delivered between the check and the snapshot: an empty bundle helps no one.
        let _ = std::fs::remove_file(&path);
        return Err(nothing());
    }
    Ok(report)
}

fn done(r: &ExportReport) -> Markup {
    html! {
        "Exported " span data-field="export_events" { (events(r.events)) } " to "
        code data-field="export_path" { (r.path.display()) }
        " (" (r.file_bytes) " bytes, SHA-256 " code { (r.checksum) } "). Carry it to the server and run "
        code { "apiary-ingest import" } "."
        @if r.marked < r.events { " " (r.events - r.marked) " of them were sent or deleted meanwhile \
            and keep that outcome." }
    }
}
