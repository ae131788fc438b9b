//! The settings page itself (`GET /settings`) and its toggle (`POST /settings/sync`).
//!
//! Every figure comes from the outbox's [`crate::outbox::Status`] (what `GET /v1/status` answers) and the
//! policy in force; the toggle runs [`crate::http::local::apply_sync`], the code of `PUT /v1/sync`.
//! Stable hooks for tests and the desktop shell: `dd[data-field=…]` (`sync`, `mode`, `endpoint_host`,
//! `pending_events`, `held_events`, `oldest_pending_age`, `last_push`, `device_id`, `user_id`,
//! `policy_hash`), `[data-field=budgets]` and `li[data-budget=…]` (see `budgets`), `#sync-button`; the
//! usage figures (`usage`), the sent events (`sent`), the export button (`export`), `#notice`; the
//! colony names choice and this device's colonies (`colonies`).
//!
//! Turning sharing on first asks the server for the tenant's colony names choice
//! (`colony_names_first`): a person sees it, and may keep names on the device, before consenting.

use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;

use super::budgets::budgets_section;
use super::colonies::colonies_section;
use super::layout::{cross_site, problem_page, signed_in_page, Problem};
use super::sections::{
    events, export_section, identity_section, shared_section, summary, toggle_section,
    waiting_section,
};
use super::sent::sent_section;
use super::signin;
use super::usage::{usage_section, Spans};
use crate::http::local::{apply_sync, SyncToggle};
use crate::http::{ApiError, AppState};
use crate::outbox::{OutboxError, SentEvent, Status, UsageWindow};

/// The outcome of the last toggle, shown once after the redirect (`/settings?done=on&released=3`).
#[derive(Debug, Default, Deserialize)]
pub struct Notice {
    done: Option<String>,
    released: Option<u64>,
    purged: Option<u64>,
}

/// The toggle's form (see the module notes of [`super`]).
#[derive(Debug, Deserialize)]
pub struct ToggleForm {
    enabled: String,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    token_file: Option<String>,
    #[serde(default)]
    include_backlog: Option<String>,
    #[serde(default)]
    purge: Option<String>,
    /// Present when the form showed the tenant's colony names choice (see [`super::colonies`]).
    #[serde(default)]
    colony_names_seen: Option<String>,
    /// Ticked: agree to send colony names (only read with `colony_names_seen`).
    #[serde(default)]
    share_colony_names: Option<String>,
}

/// How many sent events the page shows (all the outbox keeps).
const SENT_SHOWN: usize = crate::outbox::SENT_KEPT;

/// `GET /settings`.
pub async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    notice: Result<Query<Notice>, QueryRejection>,
) -> Response {
    if !signin::signed_in(&state, &headers) {
        return Redirect::to("/settings/sign-in").into_response();
    }
    let notice = notice.map(|Query(n)| n).unwrap_or_default();
    let notice = notice_text(&notice).map(|n| html! { (n) });
    render(&state, notice, None).await
}

/// `POST /settings/sync`.
pub async fn toggle(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<ToggleForm>, FormRejection>,
) -> Response {
    if !super::origin_is_own(&state, &headers) {
        return cross_site();
    }
    if !signin::signed_in(&state, &headers) {
        return Redirect::to("/settings/sign-in").into_response();
    }
    let bad = |message: String| Problem::new(StatusCode::BAD_REQUEST, message);
    let form = match form {
        Ok(Form(f)) => f,
        Err(e) => return render(&state, None, Some(bad(e.body_text()))).await,
    };
    let enabled = match form.enabled.as_str() {
        "true" => true,
        "false" => false,
        other => {
            let msg = format!("enabled must be true or false, not {other:?}");
            return render(&state, None, Some(bad(msg))).await;
        }
    };
    if enabled {
        if let Some(response) = colony_names_first(&state, &form).await {
            return response;
        }
    }
    let toggle = SyncToggle {
        enabled,
        endpoint: filled(form.endpoint),
        token_file: filled(form.token_file),
        include_backlog: form.include_backlog.is_some(),
        purge: form.purge.is_some(),
        force: false,
    };
    let (endpoint, token_file) = (toggle.endpoint.clone(), toggle.token_file.clone());
    match apply_sync(&state, toggle).await {
        Ok(r) if r.enabled => Redirect::to(&format!("/settings?done=on&released={}", r.released)),
        Ok(r) => Redirect::to(&format!("/settings?done=off&purged={}", r.purged)),
        Err(e) => {
            let (status, message) = e.status_and_message();
            let problem = Problem {
                status: Some(status),
                message,
                endpoint,
                token_file,
            };
            return render(&state, None, Some(problem)).await;
        }
    }
    .into_response()
}

/// Before sharing is turned on: asks the server (`GET /v1/whoami`, for the address and token file of
/// the form, else the remembered ones) for the tenant's colony names choice and notes it. When the
/// tenant shares names and the form did not show that yet, answers the page again with the choice shown
/// (nothing is switched); when it did, records the person's choice for this consent. None: go on.
async fn colony_names_first(state: &AppState, form: &ToggleForm) -> Option<Response> {
    let stored = state.outbox.status().await.ok()?.stored.sync;
    let endpoint = filled(form.endpoint.clone()).or(stored.endpoint);
    let token_file = filled(form.token_file.clone()).or(stored.token_file);
    if let (Some(e), Some(t)) = (&endpoint, &token_file) {
        match crate::push::whoami::whoami(e, std::path::Path::new(t)).await {
            Ok(id) => {
                if let Some(n) = id.colony_names {
                    if let Err(e) = state.outbox.adopt_colony_names(n).await {
                        tracing::warn!(error = %e, "could not store the tenant's colony names choice");
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "colony names choice not checked"),
        }
    }
    let names = state.outbox.colony_keys().names();
    if form.colony_names_seen.is_some() {
        let declined = form.share_colony_names.is_none();
        if let Err(e) = state.outbox.decline_colony_names(declined).await {
            tracing::warn!(error = %e, "could not store the colony names choice");
        }
        return None;
    }
    if names.tenant != apiary_schema::colony::ColonyNames::Names {
        return None;
    }
    let notice = html! {
        "Your organisation shares colony names. Choose below whether yours are sent, then turn sharing on."
    };
    let kept = Problem {
        endpoint: filled(form.endpoint.clone()),
        token_file: filled(form.token_file.clone()),
        ..Problem::default()
    };
    Some(render(state, Some(notice), Some(kept)).await)
}

/// The page, with the outcome of the last action or the problem of a refused one.
pub(super) async fn render(
    state: &AppState,
    notice: Option<Markup>,
    problem: Option<Problem>,
) -> Response {
    let (status, today, month, sent) = match gather(state).await {
        Ok(v) => v,
        Err(e) => {
            let (status, message) = ApiError::from(e).status_and_message();
            return problem_page(status, &message);
        }
    };
    let problem = problem.unwrap_or_default();
    let body = html! {
        h1 { "Telemetry sharing" }
        @if let Some(n) = notice { p.notice role="status" #notice { (n) } }
        @if problem.status.is_some() { p.problem role="alert" #problem { (problem.message) } }
        (summary(state, &status))
        (toggle_section(state, &status, &problem))
        (export_section(state, &status))
        (usage_section(state.zone, &today, &month))
        (shared_section(state))
        (colonies_section(state))
        (sent_section(&sent, SENT_SHOWN))
        (waiting_section(&status))
        (budgets_section(&status))
        (identity_section(state, &status))
    };
    let code = problem.status.unwrap_or(StatusCode::OK);
    (code, signed_in_page(body)).into_response()
}

/// What the page shows from the outbox: status, usage today and this month, the sent events.
async fn gather(
    state: &AppState,
) -> Result<(Status, UsageWindow, UsageWindow, Vec<SentEvent>), OutboxError> {
    let status = state.outbox.status().await?;
    let spans = Spans::of(state.zone, chrono::Utc::now());
    let today = state.outbox.usage_between(spans.day.0, spans.day.1).await?;
    let month = state
        .outbox
        .usage_between(spans.month.0, spans.month.1)
        .await?;
    let sent = state.outbox.sent_events(SENT_SHOWN).await?;
    Ok((status, today, month, sent))
}

/// A form field with something in it, trimmed.
fn filled(v: Option<String>) -> Option<String> {
    v.map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

fn notice_text(n: &Notice) -> Option<String> {
    match n.done.as_deref()? {
        "on" => Some(match n.released.unwrap_or(0) {
            0 => "Sharing is on. Your consent was recorded.".to_string(),
            r => format!(
                "Sharing is on. Your consent was recorded; the {} recorded earlier will be sent too.",
                events(r)
            ),
        }),
        "off" => Some(match n.purged.unwrap_or(0) {
            0 => "Sharing is off. Nothing more leaves this device.".to_string(),
            p => format!(
                "Sharing is off. Nothing more leaves this device; the {} waiting were deleted.",
                events(p)
            ),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map, Value};

    use super::super::tests::{
        body_text, from_another_site, from_the_page, location, signed_in_cookie, state_in,
    };
    use super::*;
    use crate::config::Mode;
    use crate::outbox::SyncChange;
    use apiary_schema::colony::ColonyNames;

    /// An ingest address nothing listens at (the loopback address, port 1): sharing turns on all the
    /// same, the token's identity adopted once it answers.
    const NOWHERE: &str = "http://127.0.0.1:1";

    /// A private token file for the ingest, in `dir`.
    fn token_file(dir: &std::path::Path) -> String {
        let path = dir.join("ingest.token");
        crate::private::write_atomic(&path, b"tok-123\n").unwrap();
        path.display().to_string()
    }

    /// The toggle's form with these fields.
    fn toggle_form(fields: &[(&str, &str)]) -> Result<Form<ToggleForm>, FormRejection> {
        let fields: Map<String, Value> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        Ok(Form(serde_json::from_value(Value::Object(fields)).unwrap()))
    }

    async fn sharing_on(state: &AppState) -> bool {
        state.outbox.status().await.unwrap().stored.sync.enabled
    }

    #[tokio::test]
    async fn a_signed_in_browser_sees_the_state_of_sharing_and_any_other_is_sent_to_sign_in() {
        let dir = tempfile::tempdir().unwrap();
        let state = state_in(dir.path(), Mode::Online);
        let enable = SyncChange::Enable {
            endpoint: NOWHERE.into(),
            token_file: token_file(dir.path()),
            include_backlog: false,
        };
        state.outbox.set_sync(enable).await.unwrap();
        let r = show(
            State(state.clone()),
            from_the_page(None),
            Ok(Query(Notice::default())),
        )
        .await;
        assert_eq!(
            (r.status(), location(&r)),
            (StatusCode::SEE_OTHER, Some("/settings/sign-in"))
        );
        let cookie = signed_in_cookie(&state).await;
        let notice = Notice {
            done: Some("on".into()),
            released: Some(2),
            purged: None,
        };
        let r = show(
            State(state.clone()),
            from_the_page(Some(&cookie)),
            Ok(Query(notice)),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
        let page = body_text(r).await;
        for shown in [
            r#"<dd data-field="sync">On</dd>"#,
            r#"<dd data-field="endpoint_host">127.0.0.1:1</dd>"#,
            "the 2 events recorded earlier will be sent too",
        ] {
            assert!(page.contains(shown), "{shown} in {page}");
        }
    }

    #[tokio::test]
    async fn the_toggle_turns_sharing_on_and_off_and_says_what_it_did() {
        let dir = tempfile::tempdir().unwrap();
        let state = state_in(dir.path(), Mode::Online);
        let cookie = signed_in_cookie(&state).await;
        let file = token_file(dir.path());
        let endpoint = format!("  {NOWHERE} ");
        let on = toggle_form(&[
            ("enabled", "true"),
            ("endpoint", &endpoint),
            ("token_file", &file),
        ]);
        let r = toggle(State(state.clone()), from_the_page(Some(&cookie)), on).await;
        assert_eq!(
            (r.status(), location(&r)),
            (StatusCode::SEE_OTHER, Some("/settings?done=on&released=0"))
        );
        assert!(sharing_on(&state).await);
        let off = toggle_form(&[("enabled", "false")]);
        let r = toggle(State(state.clone()), from_the_page(Some(&cookie)), off).await;
        assert_eq!(
            (r.status(), location(&r)),
            (StatusCode::SEE_OTHER, Some("/settings?done=off&purged=0"))
        );
        assert!(!sharing_on(&state).await);
    }

    #[tokio::test]
    async fn a_toggle_from_another_site_s_page_or_without_a_sign_in_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let state = state_in(dir.path(), Mode::Online);
        let cookie = signed_in_cookie(&state).await;
        let file = token_file(dir.path());
        let on = [
            ("enabled", "true"),
            ("endpoint", NOWHERE),
            ("token_file", file.as_str()),
        ];
        let r = toggle(
            State(state.clone()),
            from_another_site(Some(&cookie)),
            toggle_form(&on),
        )
        .await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let r = toggle(State(state.clone()), from_the_page(None), toggle_form(&on)).await;
        assert_eq!(
            (r.status(), location(&r)),
            (StatusCode::SEE_OTHER, Some("/settings/sign-in"))
        );
        assert!(!sharing_on(&state).await, "sharing stays off");
    }

    #[tokio::test]
    async fn when_the_organisation_shares_colony_names_the_choice_is_shown_before_sharing_turns_on()
    {
        let dir = tempfile::tempdir().unwrap();
        let state = state_in(dir.path(), Mode::Online);
        state
            .outbox
            .adopt_colony_names(ColonyNames::Names)
            .await
            .unwrap();
        let cookie = signed_in_cookie(&state).await;
        let file = token_file(dir.path());
        let on = [
            ("enabled", "true"),
            ("endpoint", NOWHERE),
            ("token_file", file.as_str()),
        ];
        let r = toggle(
            State(state.clone()),
            from_the_page(Some(&cookie)),
            toggle_form(&on),
        )
        .await;
        assert_eq!(
            r.status(),
            StatusCode::OK,
            "the page again, nothing switched"
        );
        let page = body_text(r).await;
        assert!(
            page.contains("Your organisation shares colony names"),
            "{page}"
        );
        for typed in [NOWHERE, file.as_str()] {
            assert!(
                page.contains(&format!(r#"value="{typed}""#)),
                "what was typed stays in the form: {typed} in {page}"
            );
        }
        assert!(!sharing_on(&state).await);
        let seen = [on.as_slice(), &[("colony_names_seen", "on")]].concat();
        let r = toggle(
            State(state.clone()),
            from_the_page(Some(&cookie)),
            toggle_form(&seen),
        )
        .await;
        assert_eq!(
            (r.status(), location(&r)),
            (StatusCode::SEE_OTHER, Some("/settings?done=on&released=0"))
        );
        assert!(sharing_on(&state).await);
    }

    #[test]
    fn a_form_field_counts_only_with_something_in_it_trimmed() {
        assert_eq!(
            filled(Some("  https://ingest.example \n".into())).as_deref(),
            Some("https://ingest.example")
        );
        assert_eq!(filled(Some(" \t ".into())), None);
        assert_eq!(filled(None), None);
    }

    #[test]
    fn the_notice_after_a_toggle_says_what_was_released_or_deleted() {
        let said = |done: Option<&str>, released, purged| {
            notice_text(&Notice {
                done: done.map(Into::into),
                released,
                purged,
            })
        };
        assert_eq!(
            said(Some("on"), None, None).as_deref(),
            Some("Sharing is on. Your consent was recorded.")
        );
        assert_eq!(
            said(Some("on"), Some(1), None).as_deref(),
            Some("Sharing is on. Your consent was recorded; the 1 event recorded earlier will be sent too.")
        );
        assert_eq!(
            said(Some("off"), None, Some(0)).as_deref(),
            Some("Sharing is off. Nothing more leaves this device.")
        );
        assert_eq!(
            said(Some("off"), None, Some(3)).as_deref(),
            Some("Sharing is off. Nothing more leaves this device; the 3 events waiting were deleted.")
        );
        assert_eq!(said(None, Some(3), None), None);
        assert_eq!(said(Some("maybe"), None, None), None);
    }
}
