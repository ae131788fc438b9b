//! Where notifications may go: a destination's URL is checked when it is created and again before each
//! delivery, its host's addresses after DNS resolution at every delivery, and the request is pinned to
//! the addresses checked (a name that resolves to a public address at creation and to `127.0.0.1`
//! later — DNS rebinding — is refused at delivery). Public means outside every special-purpose block
//! of IANA's registries, IPv4-embedding IPv6 forms included ([`super::address`]). Only `https://`; a
//! Slack destination only `https://hooks.slack.com/…`. The operator's
//! `alerts.allow_private_destinations = true` lifts the address and host rules (local use and tests).
//! Redirects are never followed.
//!
//! A destination's URL is a secret (a Slack webhook's is its only one): answered once, at creation;
//! listed as its host and a [`fingerprint`].

use std::net::{IpAddr, SocketAddr};

use reqwest::Url;
use sha2::{Digest, Sha256};

use super::address;
pub use super::address::is_public;

/// A destination's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Generic JSON, signed (`X-Apiary-Signature`).
    Webhook,
    /// A Slack incoming webhook (`{"text": …}`).
    Slack,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "webhook" => Some(Kind::Webhook),
            "slack" => Some(Kind::Slack),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Webhook => "webhook",
            Kind::Slack => "slack",
        }
    }
}

/// Slack's incoming-webhook host: the only one a Slack destination may name.
pub const SLACK_HOST: &str = "hooks.slack.com";

/// Why a delivery's destination could not be resolved to addresses it may be sent to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The name did not resolve (now): worth retrying.
    #[error("cannot resolve {host}: {cause}")]
    Lookup { host: String, cause: String },
    /// It resolved to nothing.
    #[error("{host} resolves to no address")]
    NoAddress { host: String },
    /// One of its addresses is not public: refused for good.
    #[error("{host} resolves to {ip}, which is not a public address ({block}; refused: server-side request forgery)")]
    NotPublic {
        host: String,
        ip: IpAddr,
        block: &'static str,
    },
}

/// Checks a destination URL as given (at creation, and again before each delivery): parses, `https`
/// (or `http` when private ones are allowed), no credentials in it, a host that is not a non-public
/// address literal, `localhost` or a single label; a Slack destination must be
/// `https://hooks.slack.com/…` (whatever the kind, the operator's `allow_private_destinations` lifts
/// the host rules, for local use and tests).
pub fn check_url(kind: Kind, raw: &str, allow_private: bool) -> Result<Url, String> {
    if raw.len() > 2000 {
        return Err("url: at most 2000 characters".into());
    }
    let url = Url::parse(raw).map_err(|e| format!("url: not a URL ({e})"))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => {
            return Err("url: must be https:// (http:// only with alerts.allow_private_destinations, for local use)".into())
        }
        other => return Err(format!("url: scheme {other:?} is not https")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("url: credentials in the URL are not accepted (use the secret)".into());
    }
    let Some(host) = url.host_str().map(bare) else {
        return Err("url: no host".into());
    };
    if allow_private {
        return Ok(url);
    }
    if kind == Kind::Slack
        && !(url.host_str() == Some(SLACK_HOST) && url.port_or_known_default() == Some(443))
    {
        return Err(format!(
            "url: a Slack destination is https://{SLACK_HOST}/services/… (no other host, address or port)"
        ));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        if let Some(block) = address::refusal(ip) {
            return Err(format!("url: {ip} is not a public address ({block})"));
        }
    } else {
        let d = host.trim_end_matches('.');
        if d == "localhost" || d.ends_with(".localhost") || !d.contains('.') {
            return Err(format!("url: {d:?} is not a public host name"));
        }
    }
    Ok(url)
}

/// A URL's host as a name or an address literal (an IPv6 one without its brackets; the URL parser
/// has already turned every IPv4 spelling — `0x7f.1`, `2130706433` — into dotted decimal).
fn bare(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Resolves the URL's host now and checks every address it resolves to (any non-public one refuses the
/// delivery, unless allowed): the addresses to pin the request to.
pub async fn resolve(url: &Url, allow_private: bool) -> Result<Vec<SocketAddr>, ResolveError> {
    let host = url.host_str().map(bare).unwrap_or_default().to_string();
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| ResolveError::Lookup {
            host: host.clone(),
            cause: e.to_string(),
        })?
        .collect();
    if addrs.is_empty() {
        return Err(ResolveError::NoAddress { host });
    }
    if !allow_private {
        for a in &addrs {
            if let Some(block) = address::refusal(a.ip()) {
                return Err(ResolveError::NotPublic {
                    host,
                    ip: a.ip(),
                    block,
                });
            }
        }
    }
    Ok(addrs)
}

/// A listed destination's URL fingerprint: the first 12 hex digits of the SHA-256 of the URL as
/// answered when it was created (`printf %s "$URL" | sha256sum | cut -c1-12`) — says which URL it is
/// to whoever has it, and nothing to whoever has not.
pub fn fingerprint(url: &str) -> String {
    let mut hex = hex::encode(Sha256::digest(url.as_bytes()));
    hex.truncate(12);
    hex
}

/// A listed destination's host: the URL's host, with its port when that is not the scheme's default.
pub fn listed_host(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            (None, _) => String::new(),
        },
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_before_anything_is_stored() {
        let ok = |k, u| check_url(k, u, false);
        assert!(ok(Kind::Webhook, "https://hooks.example.com/apiary").is_ok());
        assert!(ok(Kind::Slack, "https://hooks.slack.com/services/T/B/X").is_ok());
        for (k, u) in [
            (Kind::Webhook, "http://hooks.example.com/x"),
            (Kind::Webhook, "https://127.0.0.1/x"),
            (Kind::Webhook, "https://[::1]/x"),
            (Kind::Webhook, "https://169.254.169.254/latest/meta-data"),
            (Kind::Webhook, "https://localhost/x"),
            (Kind::Webhook, "https://intranet/x"),
            (Kind::Webhook, "https://user:pw@hooks.example.com/x"),
            (Kind::Webhook, "ftp://hooks.example.com/x"),
            (Kind::Webhook, "https://[::127.0.0.1]/x"),
            (Kind::Webhook, "https://[::ffff:0:127.0.0.1]/x"),
            (Kind::Webhook, "https://[100::1]/x"),
            (Kind::Webhook, "https://0x7f.1/x"),
            (Kind::Webhook, "https://2130706433/x"),
            (Kind::Slack, "https://hooks.example.com/x"),
            (Kind::Slack, "https://1.1.1.1/services/T/B/X"),
            (Kind::Slack, "https://[2606:4700:4700::1111]/services/T/B/X"),
            (
                Kind::Slack,
                "https://hooks.slack.com.example.com/services/T/B/X",
            ),
            (Kind::Slack, "https://hooks.slack.com:8443/services/T/B/X"),
            (Kind::Slack, "https://hooks.slack.com./services/T/B/X"),
        ] {
            assert!(ok(k, u).is_err(), "{u}");
        }
        assert!(check_url(Kind::Webhook, "http://127.0.0.1:9/x", true).is_ok());
        let err = ok(Kind::Webhook, "https://[::169.254.169.254]/x").unwrap_err();
        assert!(err.contains("not a public address"), "{err}");
    }

    #[test]
    fn a_listed_destination_shows_its_host_and_fingerprint_only() {
        let url = "https://hooks.slack.com/services/T0/B0/x";
        // printf %s 'https://hooks.slack.com/services/T0/B0/x' | sha256sum | cut -c1-12
        assert_eq!(fingerprint(url), "46e1e49dd424");
        assert_eq!(listed_host(url), "hooks.slack.com");
        assert_eq!(
            listed_host("https://hooks.example.com:8443/x?token=t"),
            "hooks.example.com:8443"
        );
        assert_eq!(listed_host("https://[2606:4700::1]/x"), "[2606:4700::1]");
    }

    #[tokio::test]
    async fn delivery_time_resolution_refuses_private_addresses() {
        let url = Url::parse("https://localhost:1/x").unwrap();
        let err = resolve(&url, false).await.unwrap_err();
        assert!(matches!(err, ResolveError::NotPublic { .. }), "{err}");
        assert!(err.to_string().contains("not a public address"), "{err}");
        assert!(!resolve(&url, true).await.unwrap().is_empty());
    }

    #[test]
    fn kinds_read_back_the_words_they_are_stored_as() {
        for (k, word) in [(Kind::Webhook, "webhook"), (Kind::Slack, "slack")] {
            assert_eq!(k.as_str(), word);
            assert_eq!(Kind::parse(word), Some(k));
        }
        for word in ["", "Webhook", "SLACK", "email"] {
            assert_eq!(Kind::parse(word), None, "{word:?}");
        }
    }

    #[test]
    fn a_url_of_2000_characters_is_taken_and_one_longer_is_not() {
        let base = "https://hooks.example.com/";
        let at = |n: usize| format!("{base}{}", "a".repeat(n - base.len()));
        assert!(check_url(Kind::Webhook, &at(2000), false).is_ok());
        let err = check_url(Kind::Webhook, &at(2001), false).unwrap_err();
        assert!(err.contains("at most 2000"), "{err}");
    }

    #[test]
    fn a_user_name_alone_or_a_password_alone_is_refused_as_credentials() {
        for u in [
            "https://user@hooks.example.com/x",
            "https://:pw@hooks.example.com/x",
        ] {
            let err = check_url(Kind::Webhook, u, false).unwrap_err();
            assert!(err.contains("credentials"), "{u}: {err}");
        }
    }

    #[test]
    fn names_under_localhost_are_not_public_hosts() {
        for u in ["https://hooks.localhost/x", "https://a.b.localhost./x"] {
            let err = check_url(Kind::Webhook, u, false).unwrap_err();
            assert!(err.contains("is not a public host name"), "{u}: {err}");
        }
    }
}
