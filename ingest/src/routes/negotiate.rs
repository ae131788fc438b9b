//! The form of a usage or listing answer: JSON, or CSV ([`crate::query::usage::csv`],
//! [`crate::query::listings_csv`]) when the query says
//! `format=csv`, or, without a `format`, when the `Accept` header names `text/csv` and not
//! `application/json` (a browser's or curl's `*/*` still gets JSON). The same rows either way.

use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::query::usage::{csv, AnswerFormat, UsageJson};

/// Whether the caller asked for CSV.
pub fn wants_csv(format: Option<AnswerFormat>, headers: &HeaderMap) -> bool {
    match format {
        Some(f) => f == AnswerFormat::Csv,
        None => {
            let types: Vec<String> = headers
                .get_all(header::ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(|t| {
                    t.split(';')
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_ascii_lowercase()
                })
                .collect();
            types.iter().any(|t| t == "text/csv") && !types.iter().any(|t| t == "application/json")
        }
    }
}

/// The answer: `json` as JSON, or its usage part as a CSV download named after `what`.
pub fn usage_answer<T: UsageJson>(csv_wanted: bool, json: T, what: &str) -> Response {
    if !csv_wanted {
        return json_sized(&json);
    }
    let u = json.usage();
    let mut r = csv_answer(csv::render(u), &csv::file_name(u, what));
    // A page's next cursor, as the session list's CSV pages carry theirs (absent after the last page).
    if let Some(v) = u
        .next_cursor
        .as_ref()
        .and_then(|c| c.as_deref())
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        r.headers_mut().insert(NEXT_CURSOR, v);
    }
    r
}

/// The header that carries a CSV page's `next_cursor`.
pub const NEXT_CURSOR: header::HeaderName = header::HeaderName::from_static("x-next-cursor");

/// About the JSON bytes of one usage row, a little over those measured (480–530 for rows by user, model
/// or tool and day), so that the buffer seldom grows.
const ROW_BYTES: usize = 600;

/// `value` as JSON ([`UsageJson`]) into a buffer sized for its usage rows at once. `Json` grows its
/// buffer from 128 bytes by doubling, copying what it holds each time: for a 5 MB page that is 16
/// copies, 10 MB moved.
fn json_sized<T: UsageJson>(value: &T) -> Response {
    let rows = value.usage().rows.len();
    let mut body = Vec::with_capacity(rows.saturating_mul(ROW_BYTES).saturating_add(1024));
    match value.write_json(&mut body) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(e) => crate::error::ApiError::Internal(e.into()).into_response(),
    }
}

/// CSV text as a download named `file_name`.
pub fn csv_answer(text: String, file_name: &str) -> Response {
    let disposition = format!("attachment; filename=\"{file_name}\"");
    let mut r = text.into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(csv::CONTENT_TYPE),
    );
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn the_parameter_wins_and_accept_decides_without_it() {
        assert!(wants_csv(None, &accept("text/csv")));
        assert!(wants_csv(
            None,
            &accept("text/csv; charset=utf-8, */*;q=0.1")
        ));
        assert!(!wants_csv(None, &accept("*/*")));
        assert!(!wants_csv(None, &accept("application/json, text/csv")));
        assert!(!wants_csv(None, &HeaderMap::new()));
        assert!(wants_csv(Some(AnswerFormat::Csv), &HeaderMap::new()));
        assert!(!wants_csv(Some(AnswerFormat::Json), &accept("text/csv")));
    }
}
