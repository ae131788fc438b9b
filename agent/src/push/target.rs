//! Where pushes go and with which credential: the rules a sync target must meet.
//!
//! - **Endpoint**: an `https://` URL; plain `http://` only to a loopback address (`127.0.0.0/8`, `[::1]`),
//!   for local testing and the demo. No credentials, query or fragment in it (the token lives in the
//!   token file; the agent appends `/v1/batches`).
//! - **Token file**: a regular file owned by the user the agent runs as, `0600` or stricter
//!   ([`crate::private::read_secret_file`]).
//!
//! [`check`] applies both when sync is enabled (`PUT /v1/sync`, `sync enable`), so a bad target is
//! refused with the reason and never stored. The push loop applies them again before every batch (an
//! endpoint stored by an older agent, a token file loosened later): a target that fails then releases the
//! claimed rows at once and pauses sync with the reason, so nothing waits for a claim's lease to expire.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use secrecy::SecretString;

use super::client::PushError;
use crate::private::{self, SecretFileError};

/// `<endpoint>/v1/batches`, if `endpoint` meets the endpoint rule (see the module notes).
pub fn batches_url(endpoint: &str) -> Result<reqwest::Url, PushError> {
    let refuse = |why: &str| PushError::Endpoint(endpoint.into(), why.into());
    if !endpoint.contains("://") {
        return Err(refuse(&format!(
            "it has no scheme: add https:// (or http:// for a loopback address), e.g. https://{endpoint}"
        )));
    }
    let base = reqwest::Url::parse(endpoint).map_err(|e| refuse(&e.to_string()))?;
    match base.scheme() {
        "https" => {}
        "http" if is_loopback(&base) => {}
        "http" => {
            return Err(refuse(
                "plain http:// is allowed only to a loopback address (127.0.0.1, [::1]) for local \
                 testing; use https://",
            ))
        }
        other => return Err(refuse(&format!("scheme {other} is not https"))),
    }
    if base.host().is_none() {
        return Err(refuse("it names no host"));
    }
    if !base.username().is_empty() || base.password().is_some() {
        return Err(refuse(
            "it must not hold credentials; the token goes in the token file",
        ));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(refuse(
            "it must be a base URL without a query or fragment (the agent appends /v1/batches)",
        ));
    }
    let joined = format!("{}/v1/batches", endpoint.trim_end_matches('/'));
    reqwest::Url::parse(&joined).map_err(|e| refuse(&e.to_string()))
}

fn is_loopback(url: &reqwest::Url) -> bool {
    url.host_str()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
        .and_then(|h| h.parse::<IpAddr>().ok())
        .is_some_and(|ip| ip.is_loopback())
}

/// Reads the bearer token after checking the file (see the module notes). Never logged.
pub fn read_token(path: &Path) -> Result<SecretString, PushError> {
    Ok(SecretString::from(private::read_secret_file(path)?))
}

/// Checks a sync target before it is stored: the endpoint and the token file. Returns the token file's
/// canonical path, which is what is stored.
pub fn check(endpoint: &str, token_file: &Path) -> Result<PathBuf, PushError> {
    batches_url(endpoint)?;
    Ok(private::check_token_file(token_file)?)
}

impl From<SecretFileError> for PushError {
    fn from(e: SecretFileError) -> Self {
        PushError::TokenFile(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_https_or_loopback_http_base_urls() {
        assert_eq!(
            batches_url("https://ingest.example/").unwrap().as_str(),
            "https://ingest.example/v1/batches"
        );
        assert_eq!(
            batches_url("http://127.0.0.1:8080").unwrap().as_str(),
            "http://127.0.0.1:8080/v1/batches"
        );
        assert!(batches_url("http://[::1]:1/api").is_ok());
        assert!(batches_url("http://127.3.4.5").is_ok());
        for bad in [
            "http://ingest.example",
            "http://10.0.0.1:8080",
            "http://localhost.evil.example",
            "http://0.0.0.0:8080",
            "ftp://x",
            "file:///etc/passwd",
            "not a url",
            "https://user:pw@ingest.example",
            "https://ingest.example/?q=1",
            "https://ingest.example/#f",
        ] {
            let e = batches_url(bad).expect_err(bad).to_string();
            assert!(e.contains(bad), "the error names the endpoint: {e}");
        }
        let e = batches_url("http://ingest.example")
            .unwrap_err()
            .to_string();
        assert!(e.contains("use https://"), "{e}");
    }
}
