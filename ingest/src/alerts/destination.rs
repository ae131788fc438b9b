//! Where notifications may go: a destination's URL is checked when it is created and its host's
//! addresses again at every delivery, after DNS resolution, and the request is pinned to the addresses
//! checked (a name that resolves to a public address at creation and to `127.0.0.1` later — DNS
//! rebinding — is refused at delivery). Only `https://` to public addresses, unless the operator's config
//! says `alerts.allow_private_destinations = true` (local use and tests). Redirects are never followed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;

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

/// Whether `ip` is an address on the public internet: not loopback, private, link-local, shared (CGNAT),
/// unspecified, broadcast, multicast, documentation, benchmarking or reserved; an IPv4-mapped or NAT64
/// IPv6 address is judged by its IPv4 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let s = v6.segments();
            // 64:ff9b::/96 (NAT64) carries an IPv4 address in its last 32 bits.
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let v4 =
                    Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
                return is_public_v4(v4);
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated) fec0::/10
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || v6 == Ipv6Addr::from([0u16, 0, 0, 0, 0, 0, 0, 1]))
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_unspecified()
        || ip.is_multicast()
        || o[0] == 0 // "this network"
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // shared address space 100.64.0.0/10
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // benchmarking 198.18.0.0/15
        || o[0] >= 240) // reserved
}

/// Checks a destination URL as given (at creation): parses, `https` (or `http` when private ones are
/// allowed), no credentials in it, a host that is not a non-public address literal or `localhost`; a
/// Slack destination must be Slack's webhook host unless private ones are allowed (tests).
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
    let Some(host) = url.host_str() else {
        return Err("url: no host".into());
    };
    if !allow_private {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            if !is_public(ip) {
                return Err(format!("url: {ip} is not a public address"));
            }
        } else {
            let d = bare.trim_end_matches('.').to_ascii_lowercase();
            if d == "localhost" || d.ends_with(".localhost") || !d.contains('.') {
                return Err(format!("url: {d:?} is not a public host name"));
            }
            if kind == Kind::Slack && d != "hooks.slack.com" {
                return Err(
                    "url: a Slack destination is https://hooks.slack.com/services/…".into(),
                );
            }
        }
    }
    Ok(url)
}

/// Resolves the URL's host now and checks every address it resolves to (any non-public one refuses the
/// delivery, unless allowed): the addresses to pin the request to.
pub async fn resolve(url: &Url, allow_private: bool) -> Result<Vec<SocketAddr>, String> {
    let host = url.host_str().ok_or("no host")?;
    let port = url.port_or_known_default().ok_or("no port")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    if !allow_private {
        if let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
            return Err(format!(
                "{host} resolves to {}, which is not a public address (refused: server-side request forgery)",
                bad.ip()
            ));
        }
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "2001:db8::1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

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
            (Kind::Slack, "https://hooks.example.com/x"),
        ] {
            assert!(ok(k, u).is_err(), "{u}");
        }
        assert!(check_url(Kind::Webhook, "http://127.0.0.1:9/x", true).is_ok());
    }

    #[tokio::test]
    async fn delivery_time_resolution_refuses_private_addresses() {
        let url = Url::parse("https://localhost:1/x").unwrap();
        let err = resolve(&url, false).await.unwrap_err();
        assert!(err.contains("not a public address"), "{err}");
        assert!(!resolve(&url, true).await.unwrap().is_empty());
    }
}
