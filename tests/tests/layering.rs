//! The module layering of the production code: no import cycle between sibling modules.
//!
//! For every crate of the workspace, the module tree is read from its `lib.rs` (`mod` lines, test modules
//! left out), and every path a module names (`use crate::…`, `use super::…`, `self::…`, a child module by
//! name, and the same paths written inline in code) is resolved to the module that defines the item,
//! following `pub use` re-exports. At each level of the tree the children of one module are the nodes, and
//! child `a` points at sibling `b` when anything in `a`'s subtree names anything in `b`'s. A strongly
//! connected set of two or more siblings is a cycle: the shared piece belongs in a leaf module below both.
//!
//! What stays in a cycle for now is in [`ALLOWED`], each entry with its reason. The list can only shrink:
//! a cycle outside it fails, a member added to an allowed cycle fails, and an entry that no longer
//! matches any cycle fails too (so it is removed when its cycle is broken).
//!
//! Code under `#[cfg(test)]` is not production code and is not read; nor are benches, binaries under
//! `src/bin/` and the black-box crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A cycle not broken yet: the crate, the parent module whose children form it, the members it may have
/// (at most), and why it is still there.
struct Allowed {
    krate: &'static str,
    parent: &'static str,
    members: &'static [&'static str],
    reason: &'static str,
}

const ALLOWED: &[Allowed] = &[];

/// The crates whose production modules are held to the layering, by folder under the workspace root.
const CRATES: &[&str] = &["agent", "ingest", "shared-schema", "plumbing"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

#[test]
fn production_modules_import_no_sibling_in_a_cycle() {
    let mut problems = Vec::new();
    let mut matched = vec![false; ALLOWED.len()];
    for krate in CRATES {
        let src = root().join(krate).join("src");
        for cycle in cycles(&src) {
            let allowed = ALLOWED.iter().position(|a| {
                a.krate == *krate
                    && a.parent == cycle.parent
                    && cycle
                        .members
                        .iter()
                        .all(|m| a.members.contains(&m.as_str()))
            });
            match allowed {
                Some(i) => matched[i] = true,
                None => problems.push(format!("{krate}: {cycle}")),
            }
        }
    }
    for (a, seen) in ALLOWED.iter().zip(&matched) {
        if !seen {
            problems.push(format!(
                "{}: the allowed cycle among the children of `{}` ({}) is gone: remove it from ALLOWED",
                a.krate,
                a.parent,
                a.members.join(", ")
            ));
        }
    }
    for a in ALLOWED {
        assert!(!a.reason.is_empty(), "every allowed cycle says why");
    }
    assert!(
        problems.is_empty(),
        "import cycles between sibling modules (move the shared piece down into a leaf module):\n{}",
        problems.join("\n")
    );
}

/// The reader finds a cycle it is shown, and none that only test code makes: the test above can fail.
#[test]
fn the_reader_finds_a_cycle_through_a_reexport_and_ignores_test_code() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    write(
        "a/mod.rs",
        "mod inner;\npub use inner::Thing;\n#[cfg(test)]\nmod tests { use crate::c::C; }\n",
    );
    write("a/inner.rs", "pub struct Thing(crate::b::B);\n");
    write("b.rs", "use crate::{a::Thing, c};\npub struct B;\n");
    write("c.rs", "// crate::a::Thing in a comment\npub struct C(&'static str);\nconst S: &str = \"crate::a::Thing\";\n#[cfg(test)]\nfn t() -> crate::a::Thing { todo!() }\n");
    let found: Vec<String> = cycles(dir.path()).iter().map(|c| c.to_string()).collect();
    assert_eq!(
        found,
        vec!["cycle among the children of `crate`: a -> b -> a"]
    );

    write("b.rs", "pub struct B;\n");
    assert!(cycles(dir.path()).is_empty());

    write("a/inner.rs", "pub struct Thing(super::super::b::B);\n");
    write("b.rs", "pub struct B(crate::a::Thing);\n");
    assert_eq!(cycles(dir.path()).len(), 1);
}

/// One strongly connected set of sibling modules.
struct Cycle {
    /// The parent module, `crate` for the root.
    parent: String,
    /// The siblings, sorted.
    members: Vec<String>,
    /// Each member's arrows inside the set, for the message.
    arrows: BTreeMap<String, BTreeSet<String>>,
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cycle among the children of `{}`: ", self.parent)?;
        let arrows: Vec<String> = self
            .arrows
            .iter()
            .flat_map(|(from, to)| to.iter().map(move |t| format!("{from} -> {t}")))
            .collect();
        if self.members.len() == 2 {
            write!(
                f,
                "{} -> {} -> {}",
                self.members[0], self.members[1], self.members[0]
            )
        } else {
            write!(f, "{{{}}}: {}", self.members.join(", "), arrows.join(", "))
        }
    }
}

type ModPath = Vec<String>;

/// One module of the tree: what it names.
struct Module {
    /// Code with comments, literals and `#[cfg(test)]` items removed.
    code: String,
    children: Vec<String>,
}

/// The sibling cycles of the crate whose root is `src/lib.rs`.
fn cycles(src: &Path) -> Vec<Cycle> {
    let mut modules: BTreeMap<ModPath, Module> = BTreeMap::new();
    load(
        src.join("lib.rs"),
        src.to_path_buf(),
        Vec::new(),
        &mut modules,
    );
    let reexports = reexports(&modules);
    // Sibling arrows, by parent.
    let mut levels: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (at, module) in &modules {
        for path in paths(at, module, &modules) {
            let target = resolve(&path, &modules, &reexports, 0);
            let common = at.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == at.len() || common == target.len() {
                continue; // an ancestor or a descendant: not a sibling
            }
            levels
                .entry(at[..common].to_vec())
                .or_default()
                .entry(at[common].clone())
                .or_default()
                .insert(target[common].clone());
        }
    }
    let mut found = Vec::new();
    for (parent, arrows) in &levels {
        for members in strongly_connected(arrows) {
            let set: BTreeSet<&String> = members.iter().collect();
            let inside = members
                .iter()
                .map(|m| {
                    let to = arrows[m]
                        .iter()
                        .filter(|t| set.contains(t))
                        .cloned()
                        .collect();
                    (m.clone(), to)
                })
                .collect();
            found.push(Cycle {
                parent: if parent.is_empty() {
                    "crate".to_string()
                } else {
                    parent.join("::")
                },
                members,
                arrows: inside,
            });
        }
    }
    found
}

/// Reads `file` as the module `at` whose children live in `dir`, and its children in turn.
fn load(file: PathBuf, dir: PathBuf, at: ModPath, modules: &mut BTreeMap<ModPath, Module>) {
    let Ok(text) = std::fs::read_to_string(&file) else {
        return;
    };
    let code = without_test_items(&strip(&text));
    let children = child_modules(&code);
    for child in &children {
        let flat = dir.join(format!("{child}.rs"));
        let nested = dir.join(child).join("mod.rs");
        let mut path = at.clone();
        path.push(child.clone());
        if flat.exists() {
            load(flat, dir.join(child), path, modules);
        } else {
            load(nested, dir.join(child), path, modules);
        }
    }
    modules.insert(at, Module { code, children });
}

/// Comments, string and character literals blanked out (line structure kept).
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(b.len(), |n| i + n);
            i = end;
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if text[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if text[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest, i, b) {
            // r"…", r#"…"#, br"…"
            let open = rest.find('"').unwrap();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + open + 1;
            let end = text[body..]
                .find(&close)
                .map_or(b.len(), |n| body + n + close.len());
            out.push_str("\"\"");
            out.extend(text[i..end].chars().filter(|c| *c == '\n'));
            i = end;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if i < b.len() && b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' {
            // A character literal ('a', '\n', '\u{1F41D}') or a lifetime ('a).
            let lit = if let Some(escaped) = rest.strip_prefix("'\\") {
                escaped.find('\'').map(|n| n + 3)
            } else {
                let mut chars = rest[1..].char_indices();
                match (chars.next(), chars.next()) {
                    (Some((_, c)), Some((n, '\''))) if c != '\'' => Some(n + 2),
                    _ => None,
                }
            };
            match lit {
                Some(len) => {
                    out.push_str("' '");
                    i += len;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The count of `#` of a raw string literal starting at `i`, if one does.
fn raw_string_start(rest: &str, i: usize, b: &[u8]) -> Option<usize> {
    let after_prefix = rest.strip_prefix("br").or_else(|| rest.strip_prefix('r'))?;
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let hashes = after_prefix.bytes().take_while(|c| *c == b'#').count();
    (after_prefix.as_bytes().get(hashes) == Some(&b'"')).then_some(hashes)
}

/// The code with every item under `#[cfg(test)]` removed.
fn without_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let b = item.as_bytes();
        let mut depth = 0usize;
        let mut end = b.len();
        for (i, c) in b.iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The words of `code` (identifiers, `::`, and single punctuation), in order.
fn tokens(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    let b = code.as_bytes();
    while i < b.len() {
        let c = b[i] as char;
        if c.is_whitespace() {
            i += 1;
        } else if is_ident(c) {
            let start = i;
            while i < b.len() && is_ident(b[i] as char) {
                i += 1;
            }
            out.push(&code[start..i]);
        } else if code[i..].starts_with("::") {
            out.push("::");
            i += 2;
        } else {
            let len = code[i..].chars().next().unwrap().len_utf8();
            out.push(&code[i..i + len]);
            i += len;
        }
    }
    out
}

/// The names of the `mod x;` lines (inline `mod x { … }` blocks belong to the file's module here).
fn child_modules(code: &str) -> Vec<String> {
    let t = tokens(code);
    let mut out = Vec::new();
    for i in 0..t.len().saturating_sub(2) {
        let after_visibility = i == 0 || t[i - 1] != "::";
        if t[i] == "mod" && after_visibility && t[i + 2] == ";" {
            out.push(t[i + 1].to_string());
        }
    }
    out
}

/// A `use` tree flattened: `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e` (`as` names dropped, `self`
/// folded into its parent, `*` kept as the module).
fn flatten_use(tokens: &[&str]) -> Vec<Vec<String>> {
    fn walk(t: &[&str], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut path = prefix.clone();
        while *i < t.len() {
            match t[*i] {
                "::" => *i += 1,
                "{" => {
                    *i += 1;
                    loop {
                        walk(t, i, path.clone(), out);
                        match t.get(*i) {
                            Some(&",") => *i += 1,
                            Some(&"}") => {
                                *i += 1;
                                break;
                            }
                            _ => break,
                        }
                        if t.get(*i) == Some(&"}") {
                            *i += 1;
                            break;
                        }
                    }
                    return;
                }
                "," | "}" => break,
                "as" => *i += 2,
                "*" => *i += 1,
                "self" if !path.is_empty() => *i += 1,
                word => {
                    path.push(word.to_string());
                    *i += 1;
                }
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    walk(tokens, &mut i, Vec::new(), &mut out);
    out
}

/// Every path the module `at` names that may lead into the crate, made absolute (from the crate root).
fn paths(at: &ModPath, module: &Module, modules: &BTreeMap<ModPath, Module>) -> Vec<ModPath> {
    let t = tokens(&module.code);
    let mut raw: Vec<Vec<String>> = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let starts_path = i == 0 || (t[i - 1] != "::" && t[i - 1] != "." && t[i - 1] != "mod");
        if t[i] == "use" && starts_path {
            let end = t[i..]
                .iter()
                .position(|w| *w == ";")
                .map_or(t.len(), |n| i + n);
            raw.extend(flatten_use(&t[i + 1..end]));
            i = end;
            continue;
        }
        let first = t[i];
        let named = first == "crate"
            || first == "super"
            || first == "self"
            || module.children.iter().any(|c| c == first);
        if starts_path && named && t.get(i + 1) == Some(&"::") {
            let mut path = vec![first.to_string()];
            let mut j = i + 1;
            while t.get(j) == Some(&"::") && t.get(j + 1).is_some_and(|w| w.chars().all(is_ident)) {
                path.push(t[j + 1].to_string());
                j += 2;
            }
            raw.push(path);
            i = j;
            continue;
        }
        i += 1;
    }
    raw.into_iter()
        .filter_map(|p| absolute(at, &p, module))
        .filter(|p| modules.contains_key(&p[..1]))
        .collect()
}

/// `p` as seen from the module `at`, from the crate root; `None` for a path outside the crate.
fn absolute(at: &ModPath, p: &[String], module: &Module) -> Option<ModPath> {
    let mut base = at.clone();
    let mut rest = p;
    match p.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &p[1..];
        }
        Some("self") => rest = &p[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        Some(first) if module.children.iter().any(|c| c == first) => {}
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    (!base.is_empty()).then_some(base)
}

/// `pub use` re-exports of each module: (module, name) → the path it stands for.
fn reexports(modules: &BTreeMap<ModPath, Module>) -> BTreeMap<(ModPath, String), ModPath> {
    let mut out = BTreeMap::new();
    for (at, module) in modules {
        let t = tokens(&module.code);
        let mut i = 0;
        while i < t.len() {
            if t[i] == "use" && i > 0 && (t[i - 1] == "pub" || t[i - 1] == ")") {
                let end = t[i..]
                    .iter()
                    .position(|w| *w == ";")
                    .map_or(t.len(), |n| i + n);
                for p in flatten_use(&t[i + 1..end]) {
                    if let Some(abs) = absolute(at, &p, module) {
                        out.insert((at.clone(), p.last().unwrap().clone()), abs);
                    }
                }
                i = end;
            }
            i += 1;
        }
    }
    out
}

/// The module that defines what `path` names: the longest known module prefix, through re-exports.
fn resolve(
    path: &ModPath,
    modules: &BTreeMap<ModPath, Module>,
    reexports: &BTreeMap<(ModPath, String), ModPath>,
    depth: usize,
) -> ModPath {
    let known = (1..=path.len())
        .rev()
        .find(|n| modules.contains_key(&path[..*n]))
        .unwrap_or(0);
    let module = path[..known].to_vec();
    if depth < 8 {
        if let Some(name) = path.get(known) {
            if let Some(target) = reexports.get(&(module.clone(), name.clone())) {
                if target != path {
                    let mut next = target.clone();
                    next.extend(path[known + 1..].iter().cloned());
                    return resolve(&next, modules, reexports, depth + 1);
                }
            }
        }
    }
    module
}

/// Tarjan's strongly connected sets of two or more nodes, each sorted.
fn strongly_connected(arrows: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        arrows: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(next) = s.arrows.get(v) {
            for w in next {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if s.on_stack.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.out.push(set);
            }
        }
    }
    let mut s = State {
        arrows,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in arrows.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}
