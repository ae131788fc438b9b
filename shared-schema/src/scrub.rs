//! Secret scrubbing for the strings a policy lets through.
//!
//! Even an allowlisted string (a model name, a tool name) is scrubbed: API keys and tokens of well-known
//! shapes, `Bearer` credentials, `key=value` secrets, credentials in URLs, PEM blocks, e-mail addresses and
//! absolute paths are replaced by a bracketed placeholder (`[api-key]`, `[bearer]`, `[secret]`,
//! `[credentials]`, `[private-key]`, `[email]`, `[path]`). One combined regex tells whether a string is
//! clean, so clean strings (nearly all) cost one scan.
//!
//! Key shapes recognised: OpenAI/Anthropic `sk-…`; GitHub `ghp_ gho_ ghu_ ghs_ ghr_` and fine-grained
//! `github_pat_…`; Slack `xoxa- xoxb- xoxp- xoxr- xoxs-` (and `xapp-`); Google `AIza…`; AWS access key ids
//! `AKIA…`/`ASIA…` and secret access keys (40 characters of `[A-Za-z0-9/+]` mixing upper case, lower case
//! and digits); Stripe `sk_live_ sk_test_ rk_live_ rk_test_`; JWTs (`eyJ….….…`).

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;

/// How a rule's match is replaced.
enum Replace {
    /// By a fixed placeholder (`$1`-style groups allowed).
    With(&'static str),
    /// By `[path]`, keeping the delimiter the match starts with (e.g. a space before a path).
    PathKeepingLead,
    /// By `[api-key]` when the 40 characters mix upper case, lower case and digits (an AWS secret key,
    /// not a hex digest), keeping the delimiters around it.
    AwsSecret,
}

struct Rule {
    pattern: Regex,
    replace: Replace,
}

fn rules() -> &'static (Regex, Vec<Rule>) {
    static RULES: OnceLock<(Regex, Vec<Rule>)> = OnceLock::new();
    RULES.get_or_init(|| {
        let specs: [(&str, Replace); 10] = [
            // PEM blocks (private keys, certificates), also when cut off before their end line.
            (
                r"-----BEGIN [A-Z0-9 ]+-----(?s:.*?)(?:-----END [A-Z0-9 ]+-----|$)",
                Replace::With("[private-key]"),
            ),
            // Credentials in a URL: scheme://user:password@host.
            (
                r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]*@",
                Replace::With("${1}[credentials]@"),
            ),
            // Bearer credentials, whatever the token looks like.
            (r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+", Replace::With("[bearer]")),
            // key=value / key: value secrets, also as the last part of a longer name
            // (aws_secret_access_key=…, GITHUB_TOKEN: …).
            (
                r#"(?i)\b(?:[a-z0-9]+[_-])*(?:api[_-]?key|access[_-]?key|secret(?:[_-]access)?[_-]key|secret|token|password|passwd|authorization)\b["']?\s*[:=]\s*["']?[^\s"',;]+"#,
                Replace::With("[secret]"),
            ),
            // Well-known key shapes (see the module notes).
            (
                r"\b(?:sk-[A-Za-z0-9_-]{16,}|(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{22,}|xox[abeprs]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{30,}|[rs]k_(?:live|test)_[0-9A-Za-z]{16,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})",
                Replace::With("[api-key]"),
            ),
            (
                r"(?:^|[^A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?:$|[^A-Za-z0-9/+=])",
                Replace::AwsSecret,
            ),
            (
                r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
                Replace::With("[email]"),
            ),
            // Windows absolute paths (C:\..., \\server\share).
            (r#"(?:\b[A-Za-z]:[\\/]|\\\\)[^\s"'<>|]*"#, Replace::With("[path]")),
            // Unix absolute and home-relative paths with at least one separator after the root.
            (
                r#"(?:^|[\s"'=(\[,])(?:~|/[^\s/"'<>]+)/[^\s"'<>]*"#,
                Replace::PathKeepingLead,
            ),
            // A `file://` URL whatever follows (the path rule needs a separator after the root).
            (r"(?i)\bfile://\S*", Replace::With("[path]")),
        ];
        let any = Regex::new(
            &specs
                .iter()
                .map(|(p, _)| format!("(?:{p})"))
                .collect::<Vec<_>>()
                .join("|"),
        )
        .expect("scrub rules compile");
        let rules = specs
            .into_iter()
            .map(|(p, replace)| Rule {
                pattern: Regex::new(p).expect("scrub rule compiles"),
                replace,
            })
            .collect();
        (any, rules)
    })
}

/// True for 40 characters that mix upper case, lower case and digits (an AWS secret access key).
fn looks_like_aws_secret(s: &str) -> bool {
    let has = |f: fn(&u8) -> bool| s.as_bytes().iter().any(f);
    has(u8::is_ascii_uppercase) && has(u8::is_ascii_lowercase) && has(u8::is_ascii_digit)
}

/// Returns the string with every secret replaced by its placeholder (borrowed when already clean).
pub fn scrub(s: &str) -> Cow<'_, str> {
    let (any, rules) = rules();
    if !any.is_match(s) {
        return Cow::Borrowed(s);
    }
    let mut out = s.to_owned();
    for rule in rules {
        out = match &rule.replace {
            Replace::With(r) => rule.pattern.replace_all(&out, *r).into_owned(),
            Replace::PathKeepingLead => rule
                .pattern
                .replace_all(&out, |c: &regex::Captures<'_>| {
                    let m = &c[0];
                    let lead = m.chars().next().filter(|ch| !matches!(ch, '~' | '/'));
                    format!("{}[path]", lead.map(String::from).unwrap_or_default())
                })
                .into_owned(),
            Replace::AwsSecret => rule
                .pattern
                .replace_all(&out, |c: &regex::Captures<'_>| {
                    let m = &c[0];
                    let start =
                        m.find(|ch: char| ch.is_ascii_alphanumeric() || ch == '/' || ch == '+');
                    let start = start.unwrap_or(0);
                    let key = &m[start..(start + 40).min(m.len())];
                    if looks_like_aws_secret(key) {
                        format!(
                            "{}[api-key]{}",
                            &m[..start],
                            &m[(start + 40).min(m.len())..]
                        )
                    } else {
                        m.to_string()
                    }
                })
                .into_owned(),
        };
    }
    if out == s {
        // Only look-alikes matched (a hex digest of 40 characters).
        Cow::Borrowed(s)
    } else {
        Cow::Owned(out)
    }
}

/// True when [`scrub`] would leave the string as it is.
pub fn is_clean(s: &str) -> bool {
    matches!(scrub(s), Cow::Borrowed(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_names_pass_untouched() {
        for s in [
            "claude-sonnet-4-5-20250929",
            "read_file",
            "openai/gpt-5-mini",
            "mcp__github__create_issue",
            "tool_use",
            // A hex digest of 40 characters is not an AWS secret key; token counts are not secrets.
            "digest 3f786850e387550fdab836ed7e6dc881de23001b",
            "input_tokens: 512",
        ] {
            assert!(matches!(scrub(s), Cow::Borrowed(_)), "{s}");
        }
    }

    #[test]
    fn secrets_are_replaced() {
        let cases = [
            ("key sk-ant-api03-abcdefghijklmnop1234", "key [api-key]"),
            ("Authorization: Bearer eyJhbGciOi.x.y", "[secret]"),
            ("token Bearer abc.def", "token [bearer]"),
            ("mail alice@example.com now", "mail [email] now"),
            ("open /home/alice/src/main.rs please", "open [path] please"),
            ("at ~/notes/todo.md", "at [path]"),
            (r"C:\Users\alice\doc.txt", "[path]"),
            ("api_key=abc123", "[secret]"),
            ("AKIAABCDEFGHIJKLMNOP", "[api-key]"),
            ("temp ASIAABCDEFGHIJKLMNOP", "temp [api-key]"),
            ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "[api-key]"),
            ("gho_abcdefghijklmnopqrstuvwxyz0123", "[api-key]"),
            ("ghs_abcdefghijklmnopqrstuvwxyz0123", "[api-key]"),
            ("xoxb-123456789012-abcdefghijkl", "[api-key]"),
            ("xoxp-123456789012-abcdefghijkl", "[api-key]"),
            ("AIzaSyA-abcdefghijklmnopqrstuvwxyz012345", "[api-key]"),
            ("stripe sk_live_abcdefghijklmnop1234", "stripe [api-key]"),
            ("key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY end", "key [api-key] end"),
            ("aws_secret_access_key = abc/def", "[secret]"),
            ("GITHUB_TOKEN: ghx", "[secret]"),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY----- done",
                "[private-key] done",
            ),
            ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk", "[private-key]"),
            ("fetch https://bob:hunter2@git.example.org/x", "fetch https://[credentials]@git.example.org/x"),
            ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijklmnop", "[api-key]"),
        ];
        for (input, want) in cases {
            assert_eq!(scrub(input), want, "{input}");
            assert!(is_clean(&scrub(input)), "{input} scrubbed is clean");
        }
    }
}
