//! No import cycle among the module files of umio-core and of the preload
//! shim: a type lives with the concern that owns it, so that each file can
//! be read knowing only the files below it.
//!
//! A module file depends on another when its code (not its comments) names
//! it: `crate::other`, `crate::{other, ..}`, or a sibling through
//! `super::other`. The crate root (`lib.rs`), which declares the modules
//! and re-exports the public API, takes part in no cycle. A cycle among
//! more than one file fails the test, listing the files and their edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The source without comments, string and character literals.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r'
            && (i == 0 || !ident(b[i - 1]))
            && b[i + 1..]
                .iter()
                .find(|&&c| c != b'#')
                .is_some_and(|&c| c == b'"')
        {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            let mut end = vec![b'"'];
            end.extend(std::iter::repeat_n(b'#', hashes));
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&end) {
                i += 1;
            }
            i += end.len();
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && char_literal(&b[i..]).is_some() {
            i += char_literal(&b[i..]).unwrap();
            out.push_str("' '");
        } else {
            let c = src[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of the character literal `b` starts with (not a lifetime).
fn char_literal(b: &[u8]) -> Option<usize> {
    if b.get(1) == Some(&b'\\') {
        let close = b[2..].iter().position(|&c| c == b'\'')?;
        return (close < 10).then_some(close + 3);
    }
    let s = std::str::from_utf8(&b[1..b.len().min(6)])
        .ok()
        .or_else(|| {
            // A multi-byte character cut short: take what decodes.
            (2..b.len().min(6))
                .rev()
                .find_map(|n| std::str::from_utf8(&b[1..n]).ok())
        })?;
    let c = s.chars().next()?;
    (s[c.len_utf8()..].starts_with('\'')).then_some(c.len_utf8() + 2)
}

/// The modules of the crate whose sources are in `dir`, by path
/// (`sys::uffd`), with their files; the root is "".
fn modules(dir: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(dir).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            let name = if parts == ["lib"] {
                String::new()
            } else {
                parts.join("::")
            };
            out.insert(name, p);
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier at the start of `s` (after white space), and the rest.
fn ident(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// After `::` (white space allowed), the rest; `None` without one.
fn colons(s: &str) -> Option<&str> {
    s.trim_start().strip_prefix("::")
}

/// The names at the top level of the brace group `s` starts inside of.
fn group_heads(s: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut depth = 1;
    let mut expect = true;
    let mut i = 0;
    while i < s.len() && depth > 0 {
        let c = s[i..].chars().next().unwrap();
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 1 => expect = true,
            c if depth == 1 && expect && is_ident(c) => {
                let (name, rest) = ident(&s[i..]);
                out.push((name, rest));
                expect = false;
                i += name.len();
                continue;
            }
            _ => {}
        }
        i += c.len_utf8();
    }
    out
}

/// The file-level dependency graph of the crate in `dir`, without its root.
fn graph(dir: &Path) -> Graph {
    let mods = modules(dir);
    let mut g = Graph::new();
    for (m, path) in &mods {
        if m.is_empty() {
            continue;
        }
        let src = strip(&std::fs::read_to_string(path).unwrap());
        let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
        let deps = g.entry(m.clone()).or_default();
        let mut add = |base: &str, name: &str, rest: &str| {
            let full = if base.is_empty() {
                name.to_string()
            } else {
                format!("{base}::{name}")
            };
            // The deepest module the path names (`crate::sys::uffd`).
            let mut target = full.clone();
            if let Some(r) = colons(rest) {
                let (sub, _) = ident(r);
                let deeper = format!("{full}::{sub}");
                if mods.contains_key(&deeper) {
                    target = deeper;
                }
            }
            if mods.contains_key(&target) && !target.is_empty() && &target != m {
                deps.insert(target);
            }
        };
        for (kw, base) in [("crate", ""), ("super", parent)] {
            let mut from = 0;
            while let Some(at) = src[from..].find(kw) {
                let start = from + at;
                from = start + kw.len();
                let before = src[..start].chars().next_back();
                if before.is_some_and(is_ident) {
                    continue;
                }
                let Some(rest) = colons(&src[from..]) else {
                    continue;
                };
                if let Some(inner) = rest.trim_start().strip_prefix('{') {
                    for (name, after) in group_heads(inner) {
                        add(base, name, after);
                    }
                } else {
                    let (name, after) = ident(rest);
                    add(base, name, after);
                }
            }
        }
    }
    g
}

/// The strongly connected components of more than one file (Tarjan).
fn cycles(g: &Graph) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = BTreeSet::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The cycles of the crate in `dir`, each with its files' edges inside it.
fn cycles_of(dir: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let g = graph(&dir);
    cycles(&g)
        .into_iter()
        .map(|c| {
            let edges: Vec<String> = c
                .iter()
                .map(|a| {
                    let to: Vec<&str> = g[a]
                        .iter()
                        .filter(|b| c.contains(*b))
                        .map(String::as_str)
                        .collect();
                    format!("  {a} -> {}", to.join(", "))
                })
                .collect();
            format!("{}: cycle among {c:?}\n{}", dir.display(), edges.join("\n"))
        })
        .collect()
}

#[test]
fn core_has_no_import_cycle() {
    let found = cycles_of("crates/core/src");
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn preload_has_no_import_cycle() {
    let found = cycles_of("crates/preload/src");
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_checker_sees_a_cycle() {
    let dir = std::env::temp_dir().join(format!("umio-cycles-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sys")).unwrap();
    let files = [
        ("lib.rs", "mod a; mod b; mod c; mod sys;"),
        (
            "a.rs",
            "use crate::{b::X, sys::uffd};\n// crate::c\nconst S: &str = \"crate::c\";",
        ),
        ("b.rs", "fn f() { super::c::g() }"),
        ("c.rs", "use crate::a;"),
        ("sys/mod.rs", "pub mod uffd;"),
        ("sys/uffd.rs", "use super::super::a;"),
    ];
    for (f, src) in files {
        std::fs::write(dir.join(f), src).unwrap();
    }
    let g = graph(&dir);
    let found = cycles(&g);
    std::fs::remove_dir_all(&dir).unwrap();
    let abc: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    assert_eq!(found, vec![abc], "{g:?}");
    assert!(
        g["a"].contains("sys::uffd") && !g["a"].contains("c"),
        "{g:?}"
    );
}
