//! The configuration reference of `docs/configuration.md`, generated so that it cannot drift.
//!
//! Two sources, each already kept true by a test:
//! - the key registry ([`crate::env::AGENT_KEYS`], [`crate::env::INGEST_KEYS`], [`crate::env::OTHER_VARS`]):
//!   every key either program reads and its environment variable;
//! - the sample files `deploy/config/agent.toml` and `deploy/config/ingest.toml`, which each program's
//!   tests load and compare with its built-in defaults, and which must hold every key of the registry.
//!
//! From the samples comes each key's default (a key commented out is unset by default; its value is an
//! example) and its description: the comment block just above the key, or, for a key with no comment of
//! its own, the block of the key before it (a group such as `batch_max_events` / `batch_max_bytes`). A
//! comment at the end of a key's line is added to its description. A blank line ends a block, so a
//! file's or section's heading comment stays out of the first key's description.
//!
//! [`render`] writes the Markdown between the markers [`BEGIN`] and [`END`]; `cargo run -p
//! apiary-plumbing --bin gen-config-reference` rewrites that part of the page, and a test fails when the
//! page differs from what [`render`] gives.

use std::fmt::Write as _;

use crate::config::{Key, Kind};
use crate::env::{AGENT_KEYS, INGEST_KEYS, OTHER_VARS, RESERVED_PREFIXES};

/// The line after which the generated part of the page starts.
pub const BEGIN: &str =
    "<!-- generated from the key registry and deploy/config/*.toml by `cargo run -p apiary-plumbing --bin gen-config-reference`; do not edit by hand -->";
/// The line that ends the generated part.
pub const END: &str = "<!-- end of the generated reference -->";

/// Why the reference cannot be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReferenceError {
    /// A key of the registry is missing from the program's sample file.
    #[error("{program}: key `{key}` is in the registry but not in deploy/config/{program}.toml")]
    NotInSample { program: String, key: String },
    /// A key of the sample is not in the registry (no variable would set it).
    #[error(
        "{program}: deploy/config/{program}.toml has key `{key}`, which is not in the registry"
    )]
    NotInRegistry { program: String, key: String },
    /// A key has no comment of its own and no key before it to share one with.
    #[error("{program}: key `{key}` has no description in deploy/config/{program}.toml")]
    Undescribed { program: String, key: String },
    /// The page lacks the markers the generated part goes between.
    #[error("the page has no `{0}` line")]
    NoMarker(&'static str),
}

/// One key as the sample file shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleKey {
    /// Dotted path (`push.batch_max_events`).
    pub path: String,
    /// The value as written (TOML text).
    pub value: String,
    /// Commented out: unset by default, the value is an example.
    pub unset: bool,
    /// The comment that explains it, joined into one paragraph.
    pub description: String,
}

/// The keys of a sample file, in file order.
pub fn parse_sample(program: &str, text: &str) -> Result<Vec<SampleKey>, ReferenceError> {
    let mut keys: Vec<SampleKey> = Vec::new();
    let mut section = String::new();
    let mut block: Vec<String> = Vec::new();
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() {
            block.clear();
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = format!("{name}.");
            block.clear();
            continue;
        }
        let (unset, body) = match line.strip_prefix('#') {
            Some(rest) => (true, rest.trim()),
            None => (false, line),
        };
        match key_line(body) {
            Some((key, value, note)) => {
                let own = block.join(" ");
                block.clear();
                let mut description = if own.is_empty() {
                    match keys.last() {
                        Some(prev) => prev.description.clone(),
                        None => {
                            return Err(ReferenceError::Undescribed {
                                program: program.into(),
                                key: format!("{section}{key}"),
                            })
                        }
                    }
                } else {
                    own
                };
                if let Some(note) = note {
                    description = format!("{description} ({note})");
                }
                keys.push(SampleKey {
                    path: format!("{section}{key}"),
                    value: value.to_string(),
                    unset,
                    description,
                });
            }
            None if unset => block.push(body.to_string()),
            None => {}
        }
    }
    Ok(keys)
}

/// `key = value  # note` → (key, value, note); None for a line that sets no key.
fn key_line(body: &str) -> Option<(&str, &str, Option<&str>)> {
    let (key, rest) = body.split_once(" = ")?;
    let key = key.trim();
    let is_key = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
    if !is_key {
        return None;
    }
    let (value, note) = match rest.split_once("  #") {
        Some((v, n)) => (v.trim(), Some(n.trim())),
        None => (rest.trim(), None),
    };
    Some((key, value, note))
}

/// The generated Markdown (without the markers).
pub fn render(agent_sample: &str, ingest_sample: &str) -> Result<String, ReferenceError> {
    let mut out = String::new();
    program_table(&mut out, "agent", "apiary-agent", AGENT_KEYS, agent_sample)?;
    program_table(
        &mut out,
        "ingest",
        "apiary-ingest",
        INGEST_KEYS,
        ingest_sample,
    )?;
    out.push_str("### Other variables\n\n| variable | what it does |\n|---|---|\n");
    for (name, what) in OTHER_VARS {
        let _ = writeln!(out, "| `{name}` | {} |", cell(what));
    }
    let prefixes: Vec<String> = RESERVED_PREFIXES
        .iter()
        .map(|p| format!("`{p}*`"))
        .collect();
    let _ = writeln!(
        out,
        "\nVariables starting with {} belong to the scripts and tests and are never reported as unknown.",
        prefixes.join(", ")
    );
    Ok(out)
}

fn program_table(
    out: &mut String,
    program: &str,
    binary: &str,
    registry: &[Key],
    sample: &str,
) -> Result<(), ReferenceError> {
    let keys = parse_sample(program, sample)?;
    if let Some(extra) = keys
        .iter()
        .find(|k| !registry.iter().any(|r| r.path == k.path))
    {
        return Err(ReferenceError::NotInRegistry {
            program: program.into(),
            key: extra.path.clone(),
        });
    }
    let _ = writeln!(
        out,
        "### `{binary}` (sample: `deploy/config/{program}.toml`)\n\n| key | variable | type | default | what it does |\n|---|---|---|---|---|"
    );
    // A key that shares its description with the key before it points there instead of repeating it.
    let mut group: Option<(&str, &str)> = None;
    for key in registry {
        let Some(k) = keys.iter().find(|k| k.path == key.path) else {
            return Err(ReferenceError::NotInSample {
                program: program.into(),
                key: key.path.into(),
            });
        };
        let default = if k.unset {
            format!("unset (e.g. `{}`)", k.value)
        } else {
            format!("`{}`", k.value)
        };
        let description = match group {
            Some((first, text)) if k.description.starts_with(text) => {
                let note = &k.description[text.len()..];
                format!("see `{first}`{note}")
            }
            _ => {
                group = Some((key.path, k.description.as_str()));
                k.description.clone()
            }
        };
        let _ = writeln!(
            out,
            "| `{}` | `{}` | {} | {} | {} |",
            key.path,
            key.env_var(),
            kind_word(key.kind),
            cell(&default),
            cell(&description)
        );
    }
    out.push('\n');
    Ok(())
}

fn kind_word(kind: Kind) -> &'static str {
    match kind {
        Kind::Str => "string",
        Kind::Int => "integer",
        Kind::Float => "number",
        Kind::Bool => "boolean",
    }
}

/// Text safe inside a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// `page` with its generated part replaced by `generated`.
pub fn splice(page: &str, generated: &str) -> Result<String, ReferenceError> {
    let start = page.find(BEGIN).ok_or(ReferenceError::NoMarker(BEGIN))? + BEGIN.len();
    let end = page[start..]
        .find(END)
        .map(|i| i + start)
        .ok_or(ReferenceError::NoMarker(END))?;
    Ok(format!(
        "{}\n\n{}\n{}",
        &page[..start],
        generated.trim_end(),
        &page[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn read(rel: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// The page's generated part is exactly what the registry and the samples give today.
    #[test]
    fn the_configuration_page_matches_the_registry_and_the_samples() {
        let page = read("docs/configuration.md");
        let generated = render(
            &read("deploy/config/agent.toml"),
            &read("deploy/config/ingest.toml"),
        )
        .unwrap();
        let expected = splice(&page, &generated).unwrap();
        assert!(
            page == expected,
            "docs/configuration.md drifted from the key registry or deploy/config/*.toml: run \
             `cargo run -p apiary-plumbing --bin gen-config-reference` and commit the page"
        );
    }

    /// The `APIARY_*` names of a text (`APIARY_POOL_SIZE`; not a prefix such as `APIARY_PG_*` or `APIARY_`).
    fn variable_names(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (at, _) in text.match_indices("APIARY_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let next = text[at + name.len()..].chars().next();
            if !name.ends_with('_') && !matches!(next, Some('*' | '<')) {
                out.push(name);
            }
        }
        out
    }

    /// Every `APIARY_*` variable the README, the changelog and the docs name is one a program reads (the
    /// registry), one of the scripts' and tests' own (a reserved prefix), or one a script in `scripts/` or
    /// `deploy/` reads: a renamed or removed variable cannot linger in the docs.
    #[test]
    fn the_docs_name_only_variables_that_exist() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut scripts = String::new();
        for dir in ["scripts", "deploy/local", "deploy/docker", "deploy/systemd"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
                scripts.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
        let known = crate::env::registered();
        let mut pages = vec![root.join("README.md"), root.join("CHANGELOG.md")];
        for entry in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "md") {
                pages.push(entry.path());
            }
        }
        let mut unknown = Vec::new();
        for page in pages {
            let text = std::fs::read_to_string(&page).unwrap();
            for name in variable_names(&text) {
                // The docs' example of a misspelled variable, which start-up refuses.
                let ok = name == "APIARY_OUTBOX_MAX_BYTE"
                    || known.contains(&name)
                    || RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
                    || scripts.contains(&name);
                if !ok {
                    unknown.push(format!("{}: {name}", page.display()));
                }
            }
        }
        assert!(
            unknown.is_empty(),
            "variables no program or script reads:\n{}",
            unknown.join("\n")
        );
        assert_eq!(
            variable_names("`APIARY_PG_*`, APIARY_<KEY>, APIARY_POOL_SIZE=3"),
            vec!["APIARY_POOL_SIZE".to_string()]
        );
    }

    #[test]
    fn descriptions_come_from_the_block_above_or_the_key_before() {
        let sample = "# the file\n\n# Batch bounds.\nmax_events = 1\nmax_bytes = 2\n\n[push]\n# Wait.\n# Long.\n# when = 5   # an example\n";
        let keys = parse_sample("agent", sample).unwrap();
        let got: Vec<(&str, &str, bool, &str)> = keys
            .iter()
            .map(|k| {
                (
                    k.path.as_str(),
                    k.value.as_str(),
                    k.unset,
                    k.description.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("max_events", "1", false, "Batch bounds."),
                ("max_bytes", "2", false, "Batch bounds."),
                ("push.when", "5", true, "Wait. Long. (an example)"),
            ]
        );
        let err = parse_sample("agent", "first = 1\n").unwrap_err();
        assert!(matches!(err, ReferenceError::Undescribed { .. }), "{err}");
    }

    #[test]
    fn a_key_missing_on_either_side_is_an_error() {
        let agent = read("deploy/config/agent.toml");
        let ingest = read("deploy/config/ingest.toml");
        let without = agent.replace("concurrency = 4\n", "");
        assert_eq!(
            render(&without, &ingest).unwrap_err(),
            ReferenceError::NotInSample {
                program: "agent".into(),
                key: "push.concurrency".into()
            }
        );
        let extra = format!("{agent}# A key nobody reads.\nmystery = 1\n");
        assert!(matches!(
            render(&extra, &ingest).unwrap_err(),
            ReferenceError::NotInRegistry { .. }
        ));
    }
}
