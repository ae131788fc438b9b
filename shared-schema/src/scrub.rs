//! Secret scrubbing for the strings a policy lets through.
//!
//! Even an allowlisted string (a model name, a tool name) is scrubbed: API keys and tokens of well-known
//! shapes, `Bearer` credentials, `key=value` secrets, e-mail addresses and absolute paths are replaced by a
//! bracketed placeholder (`[api-key]`, `[bearer]`, `[secret]`, `[email]`, `[path]`). One combined regex
//! tells whether a string is clean, so clean strings (nearly all) cost one scan.

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;

struct Rule {
    pattern: Regex,
    replacement: &'static str,
    /// The match starts with the delimiter before the secret (e.g. a space before a path); keep it.
    keeps_lead: bool,
}

fn rules() -> &'static (Regex, Vec<Rule>) {
    static RULES: OnceLock<(Regex, Vec<Rule>)> = OnceLock::new();
    RULES.get_or_init(|| {
        let specs: [(&str, &str, bool); 6] = [
            // Bearer credentials, whatever the token looks like.
            (r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+", "[bearer]", false),
            // key=value / key: value secrets.
            (
                r#"(?i)\b(?:api[_-]?key|secret|token|password|passwd|authorization)\b["']?\s*[:=]\s*["']?[^\s"',;]+"#,
                "[secret]",
                false,
            ),
            // Well-known key shapes: OpenAI/Anthropic sk-, AWS, GitHub, Slack, Google, JWTs.
            (
                r"\b(?:sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{30,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})",
                "[api-key]",
                false,
            ),
            (r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}", "[email]", false),
            // Windows absolute paths (C:\..., \\server\share).
            (r#"(?:\b[A-Za-z]:[\\/]|\\\\)[^\s"'<>|]*"#, "[path]", false),
            // Unix absolute and home-relative paths with at least one separator after the root.
            (r#"(?:^|[\s"'=(\[,])(?:~|/[^\s/"'<>]+)/[^\s"'<>]*"#, "[path]", true),
        ];
        let any = Regex::new(&specs.iter().map(|(p, _, _)| format!("(?:{p})")).collect::<Vec<_>>().join("|"))
            .expect("scrub rules compile");
        let rules = specs
            .iter()
            .map(|(p, r, keeps_lead)| Rule {
                pattern: Regex::new(p).expect("scrub rule compiles"),
                replacement: r,
                keeps_lead: *keeps_lead,
            })
            .collect();
        (any, rules)
    })
}

/// Returns the string with every secret replaced by its placeholder (borrowed when already clean).
pub fn scrub(s: &str) -> Cow<'_, str> {
    let (any, rules) = rules();
    if !any.is_match(s) {
        return Cow::Borrowed(s);
    }
    let mut out = s.to_owned();
    for rule in rules {
        if rule.keeps_lead {
            // Keep the delimiter the path rule matched before the path.
            out = rule
                .pattern
                .replace_all(&out, |c: &regex::Captures<'_>| {
                    let m = &c[0];
                    let lead = m.chars().next().filter(|ch| !matches!(ch, '~' | '/'));
                    format!("{}[path]", lead.map(String::from).unwrap_or_default())
                })
                .into_owned();
        } else {
            out = rule
                .pattern
                .replace_all(&out, rule.replacement)
                .into_owned();
        }
    }
    Cow::Owned(out)
}

/// True when [`scrub`] would leave the string as it is.
pub fn is_clean(s: &str) -> bool {
    !rules().0.is_match(s)
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
        ];
        for (input, want) in cases {
            assert_eq!(scrub(input), want, "{input}");
            assert!(is_clean(&scrub(input)), "{input} scrubbed is clean");
        }
    }
}
