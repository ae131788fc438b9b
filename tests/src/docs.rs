//! The documentation as a test: the command blocks of `README.md` and `docs/*.md`, read and turned into
//! shell scripts that `tests/tests/docs.rs` runs against the real binaries and a real PostgreSQL.
//!
//! ## How a page marks its blocks
//! Every fenced block whose language is a shell (`sh`, `bash`, `shell`, `console`) says whether it runs:
//! - ```` ```sh run ````: run by the test, in page order, in one shell session per page that continues the
//!   previous page's variables (the book is read in the order of `docs/README.md`, after `README.md`);
//! - ```` ```sh not-run: REASON ````: not runnable here (Docker, systemd, several hosts, a browser, the
//!   test suite itself); the test counts them and prints their reasons.
//!
//! A shell block with neither mark is an error, so no command reaches a page without a decision.
//!
//! ## What a command must answer
//! A command's last line may end in an expectation comment, `# → …`:
//! - `# → 200 {rows, totals, …}` on a `curl` command: the HTTP status, and the answer is a JSON object
//!   with exactly these top-level keys (`…` at the end: at least these);
//! - `# → exit 1` on any other command: its exit status (0 otherwise, as for every command);
//! - `"text"` after either: the output (the body, for `curl`) contains the text; `!"text"`: it does not.
//!
//! Every `curl` command of a runnable block must state its status, and one that answers a JSON object
//! must state its keys. `curl … --max-time N` may end by the timeout (a stream).
//!
//! ## What the test substitutes
//! The pages name the addresses a reader uses (`127.0.0.1:8080` for the ingest, the agent's defaults
//! `127.0.0.1:4319` and `127.0.0.1:4318`, PostgreSQL at `127.0.0.1:5432` with a database `apiary`); the
//! test replaces them with free ports, the server of `DATABASE_URL` and a fresh database ([`Substitutions`]).
//! Ids and tokens are the pages' own shell variables (`TENANT=$(apiary-ingest tenant create … | tail -n1)`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The languages whose blocks must be marked.
const SHELLS: &[&str] = &["sh", "bash", "shell", "console"];

/// How a shell block is marked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// ```` ```sh run ````
    Run,
    /// ```` ```sh not-run: REASON ````
    NotRun(String),
}

/// A marked shell block of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The page, relative to the workspace root (`docs/api.md`).
    pub page: String,
    /// The line of the opening fence (1-based).
    pub line: usize,
    pub mark: Mark,
    /// The block's lines, without the fences and the fence's indentation.
    pub text: Vec<String>,
}

impl Block {
    /// `docs/api.md:42`
    pub fn place(&self) -> String {
        format!("{}:{}", self.page, self.line)
    }
}

/// A fenced block of any language (the link checker skips them all).
#[derive(Debug, Clone)]
struct Fence {
    line: usize,
    info: String,
    text: Vec<String>,
}

/// The fenced blocks of a Markdown text, and the text outside them (lines, with their numbers).
fn split_fences(text: &str) -> (Vec<Fence>, Vec<(usize, String)>) {
    let mut fences = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<(String, usize, Fence)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            Some((marker, fence_indent, fence)) => {
                if trimmed.starts_with(marker.as_str()) && trimmed.trim_end() == marker.as_str() {
                    let (_, _, f) = open.take().expect("open fence");
                    fences.push(f);
                } else {
                    let cut = line
                        .char_indices()
                        .take_while(|(j, c)| *j < *fence_indent && c.is_whitespace())
                        .count();
                    fence.text.push(line[cut..].to_string());
                }
            }
            None => {
                let marker: String = trimmed
                    .chars()
                    .take_while(|c| *c == '`' || *c == '~')
                    .collect();
                let fence_char_ok =
                    marker.chars().all(|c| c == '`') || marker.chars().all(|c| c == '~');
                if marker.len() >= 3 && fence_char_ok {
                    open = Some((
                        marker.clone(),
                        indent,
                        Fence {
                            line: n,
                            info: trimmed[marker.len()..].trim().to_string(),
                            text: Vec::new(),
                        },
                    ));
                } else {
                    prose.push((n, line.to_string()));
                }
            }
        }
    }
    (fences, prose)
}

/// The marked shell blocks of a page; an unmarked or badly marked shell block is an error naming it.
pub fn shell_blocks(page: &str, text: &str) -> Result<Vec<Block>, String> {
    let (fences, _) = split_fences(text);
    let mut out = Vec::new();
    for f in fences {
        let (lang, rest) = f.info.split_once(' ').unwrap_or((f.info.as_str(), ""));
        if !SHELLS.contains(&lang) {
            continue;
        }
        let rest = rest.trim();
        let mark = if rest == "run" {
            Mark::Run
        } else if let Some(reason) = rest.strip_prefix("not-run:") {
            let reason = reason.trim();
            if reason.is_empty() {
                return Err(format!("{page}:{}: `not-run:` needs a reason", f.line));
            }
            Mark::NotRun(reason.to_string())
        } else {
            return Err(format!(
                "{page}:{}: a `{lang}` block must be marked `{lang} run` or `{lang} not-run: REASON` (found {:?})",
                f.line, f.info
            ));
        };
        out.push(Block {
            page: page.to_string(),
            line: f.line,
            mark,
            text: f.text,
        });
    }
    Ok(out)
}

/// What a command must answer (see the module notes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expect {
    /// An HTTP status (curl) …
    pub http: Option<u16>,
    /// … or an exit status (anything else; 0 when not given).
    pub exit: Option<i32>,
    /// The answer's top-level keys, and whether others may follow (`…`).
    pub keys: Option<(Vec<String>, bool)>,
    /// Text the output must contain.
    pub contains: Option<String>,
    /// Text the output must not contain.
    pub lacks: Option<String>,
}

/// Parses the text after `# →`.
pub fn parse_expect(s: &str) -> Result<Expect, String> {
    let mut e = Expect::default();
    let mut rest = s.trim();
    if let Some(r) = rest.strip_prefix("exit ") {
        let (n, r) = r.trim_start().split_once(' ').unwrap_or((r.trim(), ""));
        e.exit = Some(n.parse().map_err(|_| format!("`exit {n}`: not a number"))?);
        rest = r.trim();
    } else if rest.starts_with(|c: char| c.is_ascii_digit()) {
        let (n, r) = rest.split_once(' ').unwrap_or((rest, ""));
        e.http = Some(
            n.parse()
                .map_err(|_| format!("`{n}`: not an HTTP status"))?,
        );
        rest = r.trim();
    }
    if let Some(r) = rest.strip_prefix('{') {
        let (inside, r) = r
            .split_once('}')
            .ok_or_else(|| format!("unclosed `{{` in {s:?}"))?;
        let mut keys: Vec<String> = inside
            .split(',')
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .collect();
        let open = matches!(keys.last().map(String::as_str), Some("…" | "..."));
        if open {
            keys.pop();
        }
        e.keys = Some((keys, open));
        rest = r.trim();
    }
    if let Some(r) = rest.strip_prefix('"') {
        let (text, r) = r
            .split_once('"')
            .ok_or_else(|| format!("unclosed `\"` in {s:?}"))?;
        e.contains = Some(text.to_string());
        rest = r.trim();
    }
    if let Some(r) = rest.strip_prefix("!\"") {
        let (text, r) = r
            .split_once('"')
            .ok_or_else(|| format!("unclosed `\"` in {s:?}"))?;
        e.lacks = Some(text.to_string());
        rest = r.trim();
    }
    if !rest.is_empty() {
        return Err(format!("cannot read {rest:?} in the expectation {s:?}"));
    }
    Ok(e)
}

/// One checked command of a script: where it is and what its answer must be (the script checks the
/// status and the text; [`check_keys`] the JSON keys afterwards, from the saved body).
#[derive(Debug, Clone)]
pub struct Check {
    pub id: usize,
    pub place: String,
    pub expect: Expect,
}

/// The text before `VAR=value` assignments end: the command's first word.
fn command_word(line: &str) -> &str {
    line.split_whitespace()
        .find(|w| !w.contains('=') || w.starts_with('-'))
        .unwrap_or("")
}

/// `<<'EOF'`, `<<EOF`, `<<-EOF` → `EOF`.
fn heredoc_end(line: &str) -> Option<String> {
    let at = line.find("<<")?;
    let rest = line[at + 2..].trim_start_matches('-').trim_start();
    let word: String = rest
        .trim_start_matches(['\'', '"'])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// Single-quoted for bash.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Turns the runnable blocks of one page into the body of a bash script, with the checks it makes.
/// `next_id` numbers checks across pages (their files share a directory).
pub fn script_for(
    blocks: &[Block],
    subs: &Substitutions,
    next_id: &mut usize,
) -> Result<(String, Vec<Check>), String> {
    let mut out = String::new();
    let mut checks = Vec::new();
    for block in blocks.iter().filter(|b| b.mark == Mark::Run) {
        let _ = writeln!(out, "__block {}", sh_quote(&block.place()));
        let lines: Vec<String> = block.text.iter().map(|l| subs.apply(l)).collect();
        let mut i = 0;
        while i < lines.len() {
            let first = i;
            // A heredoc's body is passed through as is.
            if let Some(end) = heredoc_end(&lines[i]) {
                let mut j = i;
                while j < lines.len() && lines[j].trim() != end {
                    j += 1;
                }
                for l in &lines[i..=j.min(lines.len() - 1)] {
                    out.push_str(l);
                    out.push('\n');
                }
                i = j + 1;
                continue;
            }
            let mut last = i;
            while lines[last].trim_end().ends_with('\\') && last + 1 < lines.len() {
                last += 1;
            }
            i = last + 1;
            let place = format!("{}:{}", block.page, block.line + 1 + last);
            if !lines[first].trim().is_empty() && !lines[first].trim_start().starts_with('#') {
                let _ = writeln!(
                    out,
                    "__at {}",
                    sh_quote(&format!("{}:{}", block.page, block.line + 1 + first))
                );
            }
            let tail = &lines[last];
            let (body_tail, expect) = match tail.rfind("# →") {
                Some(at) => (
                    tail[..at].trim_end().to_string(),
                    Some(
                        parse_expect(&tail[at + "# →".len()..])
                            .map_err(|e| format!("{place}: {e}"))?,
                    ),
                ),
                None => (tail.clone(), None),
            };
            let word = command_word(&lines[first]);
            let is_curl = word == "curl";
            let Some(expect) = expect else {
                if is_curl {
                    return Err(format!(
                        "{place}: a curl command must state its answer (`# → 200 {{keys}}`)"
                    ));
                }
                for l in &lines[first..=last] {
                    out.push_str(l);
                    out.push('\n');
                }
                continue;
            };
            let id = *next_id;
            *next_id += 1;
            let file = format!("\"$__DOCS/{id}\"");
            let mut command: Vec<String> = lines[first..last].to_vec();
            if is_curl {
                let status = expect.http.ok_or_else(|| {
                    format!("{place}: a curl command's expectation starts with its HTTP status")
                })?;
                if ["|", ">", ";", "&&"].iter().any(|op| {
                    lines[first..=last]
                        .iter()
                        .any(|l| l.split_whitespace().any(|w| w == *op))
                }) {
                    return Err(format!(
                        "{place}: an HTTP expectation needs a plain curl command"
                    ));
                }
                command.push(format!("{body_tail} -o {file}.body -w '%{{http_code}}'"));
                let _ = writeln!(
                    out,
                    "__rc=0\n{{ {}\n}} > {file}.status 2> {file}.err || __rc=$?",
                    command.join("\n")
                );
                let stream = lines[first..=last].iter().any(|l| l.contains("--max-time"));
                let _ = writeln!(
                    out,
                    "__expect_http {id} {status} \"$__rc\" {} {} {} {}",
                    sh_quote(expect.contains.as_deref().unwrap_or("")),
                    sh_quote(&place),
                    u8::from(stream),
                    sh_quote(expect.lacks.as_deref().unwrap_or(""))
                );
            } else {
                if expect.http.is_some() || expect.keys.is_some() {
                    return Err(format!(
                        "{place}: an HTTP status or keys need a curl command; write `exit N` for an exit status"
                    ));
                }
                command.push(body_tail);
                let _ = writeln!(
                    out,
                    "__rc=0\n{{ {}\n}} > {file}.out 2>&1 || __rc=$?",
                    command.join("\n")
                );
                let _ = writeln!(
                    out,
                    "__expect_exit {id} {} \"$__rc\" {} {} {}",
                    expect.exit.unwrap_or(0),
                    sh_quote(expect.contains.as_deref().unwrap_or("")),
                    sh_quote(&place),
                    sh_quote(expect.lacks.as_deref().unwrap_or(""))
                );
            }
            checks.push(Check { id, place, expect });
        }
    }
    Ok((out, checks))
}

/// The functions and options every page script starts with.
pub fn prelude(dir: &Path) -> String {
    format!(
        r#"set -euo pipefail
__DOCS={dir}
__block() {{ printf '\n=== docs block %s\n' "$1"; }}
__at() {{ printf '%s\n' "$1" > "$__DOCS/current"; }}
# __text FILE CONTAINS LACKS PLACE: the output holds one text and not the other.
__text() {{
    if [ -n "$2" ] && ! grep -qF -- "$2" "$1"; then
        printf 'docs: %s: the output does not contain %s\n' "$4" "$2" >&2
        exit 1
    fi
    if [ -n "$3" ] && grep -qF -- "$3" "$1"; then
        printf 'docs: %s: the output contains %s\n' "$4" "$3" >&2
        exit 1
    fi
}}
# __expect_exit ID WANT RC TEXT PLACE LACKS
__expect_exit() {{
    cat "$__DOCS/$1.out"
    if [ "$3" != "$2" ]; then
        printf 'docs: %s: expected exit status %s, got %s\n' "$5" "$2" "$3" >&2
        exit 1
    fi
    __text "$__DOCS/$1.out" "$4" "$6" "$5"
}}
# __expect_http ID STATUS RC TEXT PLACE STREAM LACKS
__expect_http() {{
    touch "$__DOCS/$1.body"
    cat "$__DOCS/$1.body"; echo
    cat "$__DOCS/$1.err" >&2
    if [ "$3" != 0 ] && ! {{ [ "$6" = 1 ] && [ "$3" = 28 ]; }}; then
        printf 'docs: %s: curl failed with exit status %s\n' "$5" "$3" >&2
        exit 1
    fi
    local got
    got=$(cat "$__DOCS/$1.status")
    if [ "$got" != "$2" ]; then
        printf 'docs: %s: expected HTTP %s, got %s\n' "$5" "$2" "$got" >&2
        exit 1
    fi
    __text "$__DOCS/$1.body" "$4" "$7" "$5"
}}
"#,
        dir = sh_quote(&dir.display().to_string())
    )
}

/// Checks the JSON keys of the answers saved in `dir` (after the page's script ran; a check whose
/// command never ran is skipped, the script's failure says why).
pub fn check_keys(dir: &Path, checks: &[Check]) -> Vec<String> {
    let mut problems = Vec::new();
    for c in checks.iter().filter(|c| c.expect.http.is_some()) {
        let Ok(body) = std::fs::read_to_string(dir.join(format!("{}.body", c.id))) else {
            continue;
        };
        let value: Option<serde_json::Value> = serde_json::from_str(&body).ok();
        let object = value.as_ref().and_then(|v| v.as_object());
        match (&c.expect.keys, object) {
            (None, Some(_)) => problems.push(format!(
                "{}: the answer is a JSON object: state its keys (`# → {} {{…}}`)",
                c.place,
                c.expect.http.unwrap_or(0)
            )),
            (Some((keys, open)), Some(obj)) => {
                let got: BTreeSet<&str> = obj.keys().map(String::as_str).collect();
                let want: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
                let missing: Vec<&&str> = want.difference(&got).collect();
                let extra: Vec<&&str> = got.difference(&want).collect();
                if !missing.is_empty() || (!open && !extra.is_empty()) {
                    problems.push(format!(
                        "{}: the answer's keys are {:?}; the page says {:?}{}",
                        c.place,
                        got,
                        want,
                        if *open { " and more" } else { "" }
                    ));
                }
            }
            (Some(_), None) => problems.push(format!(
                "{}: the page states keys but the answer is not a JSON object: {}",
                c.place,
                body.chars().take(200).collect::<String>()
            )),
            (None, None) => {}
        }
    }
    problems
}

/// Literal text of the pages → what the test runs instead (addresses, the database).
#[derive(Debug, Clone, Default)]
pub struct Substitutions {
    /// Replaced first, in order.
    pub literal: Vec<(String, String)>,
    /// `127.0.0.1:PORT` and `localhost:PORT` of the pages → free ports (the database's port excluded).
    pub ports: BTreeMap<u16, u16>,
    /// The port that stays (PostgreSQL's, after the literal replacements).
    pub keep_port: u16,
}

impl Substitutions {
    /// One line with every substitution applied; ports the map does not know yet are left as they are
    /// (see [`Substitutions::collect_ports`]).
    pub fn apply(&self, line: &str) -> String {
        let mut s = line.to_string();
        for (from, to) in &self.literal {
            s = s.replace(from.as_str(), to);
        }
        for host in ["127.0.0.1:", "localhost:"] {
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(at) = rest.find(host) {
                out.push_str(&rest[..at + host.len()]);
                rest = &rest[at + host.len()..];
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                match digits.parse::<u16>().ok().and_then(|p| self.ports.get(&p)) {
                    Some(to) => out.push_str(&to.to_string()),
                    None => out.push_str(&digits),
                }
                rest = &rest[digits.len()..];
            }
            out.push_str(rest);
            s = out;
        }
        s
    }

    /// The `127.0.0.1:PORT` / `localhost:PORT` of the runnable blocks, after the literal replacements.
    pub fn collect_ports(&self, blocks: &[Block]) -> BTreeSet<u16> {
        let mut ports = BTreeSet::new();
        for b in blocks.iter().filter(|b| b.mark == Mark::Run) {
            for line in &b.text {
                let mut s = line.clone();
                for (from, to) in &self.literal {
                    s = s.replace(from.as_str(), to);
                }
                for host in ["127.0.0.1:", "localhost:"] {
                    for (at, _) in s.match_indices(host) {
                        let digits: String = s[at + host.len()..]
                            .chars()
                            .take_while(char::is_ascii_digit)
                            .collect();
                        if let Ok(p) = digits.parse::<u16>() {
                            if p != self.keep_port && p != 0 {
                                ports.insert(p);
                            }
                        }
                    }
                }
            }
        }
        ports
    }
}

/// The pages of the book in reading order: `README.md`, `docs/README.md`, then every page the index links
/// to, in the order of its links. A page of `docs/` the index does not link is an error.
pub fn book(root: &Path) -> Result<Vec<PathBuf>, String> {
    let index = root.join("docs/README.md");
    let text = std::fs::read_to_string(&index).map_err(|e| format!("docs/README.md: {e}"))?;
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("docs/README.md")];
    for link in links(&text) {
        let target = link.target.split('#').next().unwrap_or_default();
        if target.ends_with(".md") && !target.contains('/') && !is_external(target) {
            let p = PathBuf::from("docs").join(target);
            if !pages.contains(&p) {
                pages.push(p);
            }
        }
    }
    let mut orphans = Vec::new();
    for entry in std::fs::read_dir(root.join("docs")).map_err(|e| e.to_string())? {
        let name = entry.map_err(|e| e.to_string())?.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") && !pages.contains(&PathBuf::from("docs").join(name.as_ref())) {
            orphans.push(format!("docs/{name}"));
        }
    }
    if !orphans.is_empty() {
        orphans.sort();
        return Err(format!(
            "not linked from docs/README.md (add them to the index): {}",
            orphans.join(", ")
        ));
    }
    Ok(pages)
}

/// A Markdown link or image outside code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub line: usize,
    pub target: String,
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// The links of a Markdown text (`[text](target)`, `![alt](target)`, `<img src="target">`), outside fenced
/// blocks and inline code.
pub fn links(text: &str) -> Vec<Link> {
    let (_, prose) = split_fences(text);
    let mut out = Vec::new();
    for (n, line) in prose {
        // Inline code spans hold no links.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
            plain.push(' ');
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            if let Some(end) = after.find(')') {
                let target = after[..end]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_string();
                if !target.is_empty() {
                    out.push(Link { line: n, target });
                }
                rest = &after[end..];
            } else {
                break;
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("src=\"") {
            let after = &rest[at + 5..];
            if let Some(end) = after.find('"') {
                out.push(Link {
                    line: n,
                    target: after[..end].to_string(),
                });
                rest = &after[end..];
            } else {
                break;
            }
        }
    }
    out
}

/// GitHub's anchors of a page's headings (lower case; letters, digits, `-` and `_` kept; spaces → `-`;
/// a repeated heading gets `-1`, `-2`, …).
pub fn anchors(text: &str) -> BTreeSet<String> {
    let (_, prose) = split_fences(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// Every relative link of `page` (relative to `root`) that names a missing file or heading.
pub fn broken_links(root: &Path, page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root.join(page)).unwrap_or_default();
    let dir = page.parent().unwrap_or(Path::new(""));
    let mut out = Vec::new();
    for link in links(&text) {
        if is_external(&link.target) {
            continue;
        }
        let (file, anchor) = match link.target.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (link.target.as_str(), None),
        };
        let target = if file.is_empty() {
            page.to_path_buf()
        } else {
            dir.join(file)
        };
        let full = root.join(&target);
        if !full.exists() {
            out.push(format!(
                "{}:{}: {} does not exist",
                page.display(),
                link.line,
                link.target
            ));
            continue;
        }
        if let Some(anchor) = anchor {
            let text = std::fs::read_to_string(&full).unwrap_or_default();
            if !anchors(&text).contains(anchor) {
                out.push(format!(
                    "{}:{}: {} has no heading #{anchor}",
                    page.display(),
                    link.line,
                    target.display()
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_blocks_must_be_marked() {
        let page = "text\n```sh run\necho hi\n```\n\n- item\n  ```sh not-run: needs Docker\n  docker compose up\n  ```\n```toml\na = 1\n```\n";
        let blocks = shell_blocks("p.md", page).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!((blocks[0].line, &blocks[0].mark), (2, &Mark::Run));
        assert_eq!(blocks[1].text, vec!["docker compose up".to_string()]);
        assert_eq!(blocks[1].mark, Mark::NotRun("needs Docker".into()));
        let err = shell_blocks("p.md", "```sh\nls\n```\n").unwrap_err();
        assert!(err.contains("p.md:1"), "{err}");
        assert!(shell_blocks("p.md", "```sh not-run:\nls\n```\n").is_err());
    }

    #[test]
    fn expectations_read_status_exit_keys_and_text() {
        let e = parse_expect(" 200 {rows, totals, …}").unwrap();
        assert_eq!(e.http, Some(200));
        assert_eq!(
            e.keys,
            Some((vec!["rows".to_string(), "totals".to_string()], true))
        );
        let e = parse_expect(" exit 1 \"run apiary-ingest migrate\" !\"secret\"").unwrap();
        assert_eq!(e.lacks.as_deref(), Some("secret"));
        assert_eq!(
            (e.exit, e.contains.as_deref()),
            (Some(1), Some("run apiary-ingest migrate"))
        );
        assert!(parse_expect(" 200 nonsense").is_err());
    }

    #[test]
    fn scripts_check_what_the_page_says_and_refuse_unchecked_curls() {
        let subs = Substitutions {
            ports: [(8080, 41000)].into_iter().collect(),
            keep_port: 5432,
            ..Default::default()
        };
        let block = |text: &str| Block {
            page: "p.md".into(),
            line: 10,
            mark: Mark::Run,
            text: text.lines().map(String::from).collect(),
        };
        let mut id = 0;
        let (script, checks) = script_for(
            &[block(
                "X=1\ncurl -s \\\n  http://127.0.0.1:8080/v1/x   # → 200 {a}\napiary-ingest doctor   # → exit 1 \"✗\"",
            )],
            &subs,
            &mut id,
        )
        .unwrap();
        assert_eq!(checks.len(), 2);
        assert_eq!(checks[0].place, "p.md:13");
        assert!(
            script.contains("http://127.0.0.1:41000/v1/x -o \"$__DOCS/0\".body"),
            "{script}"
        );
        assert!(
            script.contains("__expect_exit 1 1 \"$__rc\" '✗' 'p.md:14'"),
            "{script}"
        );
        let err =
            script_for(&[block("curl -s http://127.0.0.1:8080/")], &subs, &mut id).unwrap_err();
        assert!(err.contains("must state its answer"), "{err}");
        let err = script_for(
            &[block("curl -s http://x/ | jq .   # → 200 {a}")],
            &subs,
            &mut id,
        )
        .unwrap_err();
        assert!(err.contains("plain curl"), "{err}");
    }

    #[test]
    fn heredocs_pass_through_untouched() {
        let block = Block {
            page: "p.md".into(),
            line: 1,
            mark: Mark::Run,
            text: "cat > f <<'EOF'\ncurl not a command   # → 200\nEOF\necho ok"
                .lines()
                .map(String::from)
                .collect(),
        };
        let (script, checks) = script_for(&[block], &Substitutions::default(), &mut 0).unwrap();
        assert!(checks.is_empty());
        assert!(
            script.contains("curl not a command   # → 200\nEOF\n__at 'p.md:5'\necho ok"),
            "{script}"
        );
    }

    #[test]
    fn links_and_anchors_are_read_like_a_code_host_does() {
        let text = "# Getting started\n## The `/v1/usage` answer\n## Budgets, quota and alerts\nSee [a](x.md#y) and `[no](z.md)`.\n<img src=\"i.png\" alt=\"\">\n```sh run\n[x](nope.md)\n```\n";
        let found: Vec<String> = links(text).into_iter().map(|l| l.target).collect();
        assert_eq!(found, vec!["x.md#y".to_string(), "i.png".to_string()]);
        let a = anchors(text);
        assert!(a.contains("getting-started"), "{a:?}");
        assert!(a.contains("the-v1usage-answer"), "{a:?}");
        assert!(a.contains("budgets-quota-and-alerts"), "{a:?}");
    }
}
