//! Which addresses a notification may be sent to: globally reachable unicast ones, judged against IANA's
//! special-purpose address registries (`iana-ipv4-special-registry`, `iana-ipv6-special-registry`).
//!
//! - **IPv4**: public unless in a special-purpose block or multicast (`224.0.0.0/4`).
//! - **IPv6**: an allowlist first — only global unicast (`2000::/3`) can be public, which refuses
//!   loopback, unspecified, unique-local, link-local, site-local, multicast, discard-only (`100::/64`),
//!   SRv6 SIDs (`5f00::/16`) and every IPv4-embedding form outside it: IPv4-compatible (`::a.b.c.d`,
//!   deprecated), IPv4-translated (`::ffff:0:a.b.c.d`), the local-use NAT64 prefix (`64:ff9b:1::/48`);
//!   then the special-purpose blocks inside `2000::/3` (IETF assignments `2001::/23` with Teredo,
//!   documentation, 6to4, AS112).
//! - **Judged by the IPv4 address they carry**: IPv4-mapped (`::ffff:a.b.c.d`, what a dual-stack
//!   resolver may answer for an IPv4 host) and the well-known NAT64 prefix (`64:ff9b::a.b.c.d`, what
//!   DNS64 answers on an IPv6-only network): each reaches that IPv4 address, so it is as public as it.
//!   The deprecated tunnels (6to4 `2002::/16`, Teredo `2001::/32`) are refused whatever they carry:
//!   no webhook needs them, and a host with a tunnel interface would send their packets to the IPv4
//!   address inside.
//! - Blocks the registries mark globally reachable (anycast services: PCP, TURN, AS112, AMT, ORCHIDv2,
//!   drone remote ID) are refused too: no webhook lives there.
//!
//! Not known here: a network-specific NAT64 prefix (RFC 6052) inside `2000::/3` translates to any IPv4
//! address, private ones included; such networks need the egress proxy or a firewall rule.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPv4 special-purpose blocks (first address, prefix length, registry name), and multicast.
const V4_REFUSED: &[(Ipv4Addr, u8, &str)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8, "this network"),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private-use"),
    (Ipv4Addr::new(100, 64, 0, 0), 10, "shared address space"),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link local"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private-use"),
    (Ipv4Addr::new(192, 0, 0, 0), 24, "IETF protocol assignments"),
    (
        Ipv4Addr::new(192, 0, 2, 0),
        24,
        "documentation (TEST-NET-1)",
    ),
    (Ipv4Addr::new(192, 31, 196, 0), 24, "AS112-v4"),
    (Ipv4Addr::new(192, 52, 193, 0), 24, "AMT"),
    (
        Ipv4Addr::new(192, 88, 99, 0),
        24,
        "6to4 relay anycast (deprecated)",
    ),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private-use"),
    (
        Ipv4Addr::new(192, 175, 48, 0),
        24,
        "direct delegation AS112 service",
    ),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking"),
    (
        Ipv4Addr::new(198, 51, 100, 0),
        24,
        "documentation (TEST-NET-2)",
    ),
    (
        Ipv4Addr::new(203, 0, 113, 0),
        24,
        "documentation (TEST-NET-3)",
    ),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast"),
    (
        Ipv4Addr::new(240, 0, 0, 0),
        4,
        "reserved (and limited broadcast)",
    ),
];

/// IPv6 special-purpose blocks inside global unicast `2000::/3` (everything outside it is refused).
const V6_REFUSED: &[(Ipv6Addr, u8, &str)] = &[
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        "IETF protocol assignments (Teredo, benchmarking, AMT, AS112, ORCHID, DETs)",
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        "documentation",
    ),
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16, "6to4"),
    (
        Ipv6Addr::new(0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0),
        48,
        "direct delegation AS112 service",
    ),
    (
        Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
        20,
        "documentation",
    ),
];

/// The well-known NAT64 prefix `64:ff9b::/96` (RFC 6052).
const NAT64: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0);

/// Whether `ip` is a globally reachable unicast address a notification may be sent to (see the
/// module notes).
pub fn is_public(ip: IpAddr) -> bool {
    refusal(ip).is_none()
}

/// Why `ip` is not a destination (`None`: it is public); named after the registry's block.
pub fn refusal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refusal_v4(v4),
        IpAddr::V6(v6) => refusal_v6(v6),
    }
}

fn refusal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    V4_REFUSED
        .iter()
        .find(|(net, len, _)| in_v4(ip, *net, *len))
        .map(|(_, _, name)| *name)
}

fn refusal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return refusal_v4(v4);
    }
    if in_v6(ip, NAT64, 96) {
        let [.., a, b, c, d] = ip.octets();
        return refusal_v4(Ipv4Addr::new(a, b, c, d));
    }
    if !in_v6(ip, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3) {
        return Some(outside_global_unicast(ip));
    }
    V6_REFUSED
        .iter()
        .find(|(net, len, _)| in_v6(ip, *net, *len))
        .map(|(_, _, name)| *name)
}

/// The name of a block outside `2000::/3`, for the error message.
fn outside_global_unicast(ip: Ipv6Addr) -> &'static str {
    let s = ip.segments();
    if ip.is_loopback() {
        "loopback"
    } else if ip.is_unspecified() {
        "unspecified"
    } else if s[..6] == [0; 6] {
        "IPv4-compatible (deprecated)"
    } else if s[..6] == [0, 0, 0, 0, 0xffff, 0] {
        "IPv4-translated"
    } else if in_v6(ip, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        "local-use NAT64"
    } else if in_v6(ip, Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64) {
        "discard-only"
    } else if (s[0] & 0xfe00) == 0xfc00 {
        "unique-local"
    } else if (s[0] & 0xffc0) == 0xfe80 {
        "link-local"
    } else if (s[0] & 0xff00) == 0xff00 {
        "multicast"
    } else {
        "not global unicast"
    }
}

fn in_v4(ip: Ipv4Addr, net: Ipv4Addr, len: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, len: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    u128::from(ip) & mask == u128::from(net) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One registry entry as IANA publishes it: block, name, and its "globally reachable" column
    /// (`Some(true)`, `Some(false)` or `None` for N/A).
    type Entry = (&'static str, &'static str, Option<bool>);

    /// `iana-ipv4-special-registry`, every entry.
    const IPV4_REGISTRY: &[Entry] = &[
        ("0.0.0.0/8", "\"This network\"", Some(false)),
        ("0.0.0.0/32", "\"This host on this network\"", Some(false)),
        ("10.0.0.0/8", "Private-Use", Some(false)),
        ("100.64.0.0/10", "Shared Address Space", Some(false)),
        ("127.0.0.0/8", "Loopback", Some(false)),
        ("169.254.0.0/16", "Link Local", Some(false)),
        ("172.16.0.0/12", "Private-Use", Some(false)),
        ("192.0.0.0/24", "IETF Protocol Assignments", Some(false)),
        (
            "192.0.0.0/29",
            "IPv4 Service Continuity Prefix",
            Some(false),
        ),
        ("192.0.0.8/32", "IPv4 dummy address", Some(false)),
        ("192.0.0.9/32", "Port Control Protocol Anycast", Some(true)),
        (
            "192.0.0.10/32",
            "Traversal Using Relays around NAT Anycast",
            Some(true),
        ),
        ("192.0.0.170/32", "NAT64/DNS64 Discovery", Some(false)),
        ("192.0.0.171/32", "NAT64/DNS64 Discovery", Some(false)),
        ("192.0.2.0/24", "Documentation (TEST-NET-1)", Some(false)),
        ("192.31.196.0/24", "AS112-v4", Some(true)),
        ("192.52.193.0/24", "AMT", Some(true)),
        ("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", None),
        ("192.88.99.2/32", "6a44-relay anycast address", Some(true)),
        ("192.168.0.0/16", "Private-Use", Some(false)),
        (
            "192.175.48.0/24",
            "Direct Delegation AS112 Service",
            Some(true),
        ),
        ("198.18.0.0/15", "Benchmarking", Some(false)),
        ("198.51.100.0/24", "Documentation (TEST-NET-2)", Some(false)),
        ("203.0.113.0/24", "Documentation (TEST-NET-3)", Some(false)),
        ("240.0.0.0/4", "Reserved", Some(false)),
        ("255.255.255.255/32", "Limited Broadcast", Some(false)),
    ];

    /// `iana-ipv6-special-registry`, every entry.
    const IPV6_REGISTRY: &[Entry] = &[
        ("::1/128", "Loopback Address", Some(false)),
        ("::/128", "Unspecified Address", Some(false)),
        ("::ffff:0:0/96", "IPv4-mapped Address", Some(false)),
        ("64:ff9b::/96", "IPv4-IPv6 Translat.", Some(true)),
        ("64:ff9b:1::/48", "IPv4-IPv6 Translat.", Some(false)),
        ("100::/64", "Discard-Only Address Block", Some(false)),
        ("100:0:0:1::/64", "Dummy IPv6 Prefix", Some(false)),
        ("2001::/23", "IETF Protocol Assignments", Some(false)),
        ("2001::/32", "TEREDO", None),
        ("2001:1::1/128", "Port Control Protocol Anycast", Some(true)),
        (
            "2001:1::2/128",
            "Traversal Using Relays around NAT Anycast",
            Some(true),
        ),
        (
            "2001:1::3/128",
            "DNS-SD Service Registration Protocol Anycast",
            Some(true),
        ),
        ("2001:2::/48", "Benchmarking", Some(false)),
        ("2001:3::/32", "AMT", Some(true)),
        ("2001:4:112::/48", "AS112-v6", Some(true)),
        ("2001:10::/28", "Deprecated (previously ORCHID)", None),
        ("2001:20::/28", "ORCHIDv2", Some(true)),
        (
            "2001:30::/28",
            "Drone Remote ID Protocol Entity Tags (DETs) Prefix",
            Some(true),
        ),
        ("2001:db8::/32", "Documentation", Some(false)),
        ("2002::/16", "6to4", None),
        (
            "2620:4f:8000::/48",
            "Direct Delegation AS112 Service",
            Some(true),
        ),
        ("3fff::/20", "Documentation", Some(false)),
        ("5f00::/16", "Segment Routing (SRv6) SIDs", Some(false)),
        ("fc00::/7", "Unique-Local", Some(false)),
        ("fe80::/10", "Link-Local Unicast", Some(false)),
    ];

    /// The first, a middle and the last address of `cidr`.
    fn samples(cidr: &str) -> Vec<IpAddr> {
        let (net, len) = cidr.split_once('/').unwrap();
        let len: u32 = len.parse().unwrap();
        match net.parse::<IpAddr>().unwrap() {
            IpAddr::V4(n) => {
                let first = u32::from(n);
                let last = first | u32::MAX.checked_shr(len).unwrap_or(0);
                [first, first + (last - first) / 2, last]
                    .map(|a| IpAddr::V4(a.into()))
                    .to_vec()
            }
            IpAddr::V6(n) => {
                let first = u128::from(n);
                let last = first | u128::MAX.checked_shr(len).unwrap_or(0);
                [first, first + (last - first) / 2, last]
                    .map(|a| IpAddr::V6(a.into()))
                    .to_vec()
            }
        }
    }

    /// Embedded IPv4 blocks judged by the IPv4 address they carry: a public one inside is public.
    fn judged_by_embedded_ipv4(ip: IpAddr) -> bool {
        match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some() || in_v6(v6, NAT64, 96),
            IpAddr::V4(_) => false,
        }
    }

    #[test]
    fn every_special_purpose_block_of_both_registries_is_refused() {
        for (cidr, name, global) in IPV4_REGISTRY.iter().chain(IPV6_REGISTRY) {
            for ip in samples(cidr) {
                if judged_by_embedded_ipv4(ip) {
                    continue;
                }
                assert!(
                    !is_public(ip),
                    "{ip} in {cidr} ({name}, globally reachable: {global:?}) was taken as public"
                );
            }
        }
    }

    #[test]
    fn ipv4_embedded_in_ipv6_is_judged_by_its_ipv4_or_refused() {
        for ip in [
            "::127.0.0.1",
            "::169.254.169.254",
            "::10.0.0.1",
            "::8.8.8.8",
            "::ffff:0:127.0.0.1",
            "::ffff:0:8.8.8.8",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:0.0.0.0",
            "64:ff9b::127.0.0.1",
            "64:ff9b::10.0.0.1",
            "64:ff9b::169.254.169.254",
            "64:ff9b::192.168.0.1",
            "64:ff9b:1::8.8.8.8",
            "2002:7f00:1::1",
            "2002:a00:1::1",
            "2002:a9fe:a9fe::1",
            "2002:808:808::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001::ffff:ffff:f5ff:fffe",
            "100::1",
            "100::ffff:ffff:ffff:ffff",
            "fec0::1",
            "ff02::1",
            "5f00::1",
        ] {
            let parsed: IpAddr = ip.parse().unwrap();
            assert!(!is_public(parsed), "{ip}");
        }
        for ip in ["::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "64:ff9b::1.1.1.1"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn the_addresses_next_to_each_block_stay_public() {
        for ip in [
            "1.0.0.0",
            "1.1.1.1",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "191.255.255.255",
            "192.0.1.0",
            "192.0.3.0",
            "192.31.195.255",
            "192.52.194.0",
            "192.88.98.255",
            "192.88.100.0",
            "192.167.255.255",
            "192.169.0.0",
            "192.175.47.255",
            "192.175.49.0",
            "198.17.255.255",
            "198.20.0.0",
            "198.51.99.255",
            "198.51.101.0",
            "203.0.112.255",
            "203.0.114.0",
            "223.255.255.255",
            "2000::1",
            "2001:200::1",
            "2001:db7:ffff:ffff::1",
            "2001:db9::1",
            "2003::1",
            "2606:4700:4700::1111",
            "2620:4f:7fff:ffff::1",
            "2620:4f:8001::1",
            "2a00:1450:4001::1",
            "3ffe:ffff::1",
            "3fff:1000::1",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn refusals_name_the_block() {
        assert_eq!(refusal("::1".parse().unwrap()), Some("loopback"));
        assert_eq!(
            refusal("::ffff:169.254.169.254".parse().unwrap()),
            Some("link local")
        );
        assert_eq!(
            refusal("::10.0.0.1".parse().unwrap()),
            Some("IPv4-compatible (deprecated)")
        );
        assert_eq!(refusal("2002:a00:1::1".parse().unwrap()), Some("6to4"));
        assert_eq!(refusal("8.8.8.8".parse().unwrap()), None);
    }

    #[test]
    fn refusals_outside_global_unicast_name_their_block() {
        for (ip, block) in [
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("::8.8.8.8", "IPv4-compatible (deprecated)"),
            ("::ffff:0:8.8.8.8", "IPv4-translated"),
            ("64:ff9b:1::8.8.8.8", "local-use NAT64"),
            ("100::1", "discard-only"),
            ("fc00::1", "unique-local"),
            ("fdff:ffff::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("febf:ffff::1", "link-local"),
            ("ff02::1", "multicast"),
            ("fec0::1", "not global unicast"),
            ("5f00::1", "not global unicast"),
            ("4000::1", "not global unicast"),
        ] {
            assert_eq!(refusal(ip.parse().unwrap()), Some(block), "{ip}");
        }
    }
}
