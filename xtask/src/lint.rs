//! `cargo xtask lint`: formatting, clippy, unused dependencies and module cycles.
//!
//! Module cycles are found from the source text: every path into the crate in a file
//! (`crate::a::b`, `super::a`, `self::a`, or one that starts with a child module the file declares,
//! with `use x::{..}` groups expanded) is an arrow from that file to the deepest module file it
//! names, and a strongly connected group of two or more files is a cycle: a parent that uses
//! its child's items while the child uses what the parent defines is one. Re-exports (`pub use`)
//! are not dependencies: a parent that only re-exports its child's items makes no cycle with it. Arrows to the crate root (`lib.rs`, `main.rs`) do not
//! count (the root re-exports everything), nor do inline `#[cfg(test)] mod tests` blocks or
//! binaries under `src/bin/`, nor line comments (doc links). It reads text, not the compiler's
//! view, so a path in a string counts too; that errs on the side of reporting.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, cargo, install, root, run};

pub(crate) fn lint() -> Result {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    run(fmt)?;
    install::build_tools()?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    run(clippy)?;
    let mut machete = Command::new(install::cargo_machete()?);
    machete.current_dir(root());
    run(machete).map_err(|e| format!("unused dependencies (cargo machete): {e}"))?;
    cycles(&[])
}

/// Fails when a crate of the workspace (or of the workspace at `args[0]`) has a module cycle,
/// naming each.
pub(crate) fn cycles(args: &[String]) -> Result {
    let workspace = args.first().map_or_else(root, PathBuf::from);
    let cycles = module_cycles(&workspace)?;
    if cycles.is_empty() {
        eprintln!("xtask: no module cycles");
        return Ok(());
    }
    for cycle in &cycles {
        let files: Vec<String> = cycle.iter().map(|p| p.display().to_string()).collect();
        eprintln!("module cycle: {}", files.join(" <-> "));
    }
    Err(format!("{} module cycle(s)", cycles.len()))
}

/// Every module cycle inside a crate of the workspace at `root`, as paths relative to it.
pub(crate) fn module_cycles(root: &Path) -> Result<Vec<Vec<PathBuf>>> {
    let mut cycles = Vec::new();
    let mut crates: Vec<PathBuf> = fs::read_dir(root)
        .map_err(|e| format!("cannot list {}: {e}", root.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("src")))
        .filter(|src| src.is_dir())
        .collect();
    crates.sort();
    for src in crates {
        let graph = crate_graph(&src)?;
        for group in strongly_connected(&graph) {
            if group.len() > 1 {
                cycles.push(
                    group
                        .into_iter()
                        .map(|p| p.strip_prefix(root).unwrap_or(&p).to_path_buf())
                        .collect(),
                );
            }
        }
    }
    Ok(cycles)
}

type Graph = BTreeMap<PathBuf, BTreeSet<PathBuf>>;

/// The arrows between the module files of one crate's `src/`.
fn crate_graph(src: &Path) -> Result<Graph> {
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    let mut graph = Graph::new();
    for file in &files {
        let text =
            fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let here = module_path(src, file);
        let mut targets = BTreeSet::new();
        let code = without_comments(without_inline_tests(&text));
        for (anchor, segments) in paths_in(&without_reexports(&code)) {
            let mut module = match anchor {
                Anchor::Crate => Vec::new(),
                Anchor::Super(levels) => {
                    let keep = here.len().saturating_sub(levels);
                    here[..keep].to_vec()
                }
                Anchor::Child => here.clone(),
            };
            module.extend(segments);
            if let Some(target) = deepest_file(src, &module)
                && &target != file
                && !is_root(src, &target)
            {
                targets.insert(target);
            }
        }
        graph.insert(file.clone(), targets);
    }
    Ok(graph)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result {
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "bin") {
                rust_files(&path, out)?;
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are module `a::b`; `src/lib.rs` is the root.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|last| matches!(last.as_str(), "mod" | "lib" | "main"))
    {
        parts.pop();
    }
    parts
}

/// The file of the longest prefix of `module` that exists as a file.
fn deepest_file(src: &Path, module: &[String]) -> Option<PathBuf> {
    (0..=module.len()).rev().find_map(|len| {
        let dir: PathBuf = module[..len].iter().collect();
        let candidates = if len == 0 {
            vec![src.join("lib.rs"), src.join("main.rs")]
        } else {
            vec![
                src.join(&dir).with_extension("rs"),
                src.join(&dir).join("mod.rs"),
            ]
        };
        candidates.into_iter().find(|c| c.is_file())
    })
}

fn is_root(src: &Path, file: &Path) -> bool {
    file == src.join("lib.rs") || file == src.join("main.rs")
}

/// The text before an inline test module, which may import anything without making a cycle.
fn without_inline_tests(text: &str) -> &str {
    let mut search = 0;
    while let Some(found) = text[search..].find("#[cfg(test)]") {
        let at = search + found;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        if rest.starts_with("mod tests") && rest["mod tests".len()..].trim_start().starts_with('{')
        {
            return &text[..at];
        }
        search = at + 1;
    }
    text
}

/// The text without line comments (doc links name items a file does not use).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.split_once("//").map_or(line, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text without its re-exports (`pub use ..;`, `pub(crate) use ..;`): a module that re-exports
/// a child's item to its own callers does not depend on that child.
fn without_reexports(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = rest.find("pub") {
        let (before, from) = rest.split_at(found);
        kept.push_str(before);
        let after_pub = from["pub".len()..].trim_start();
        let after_scope = match after_pub.strip_prefix('(') {
            Some(scope) => scope.split_once(')').map_or(scope, |(_, r)| r).trim_start(),
            None => after_pub,
        };
        let boundary = before.as_bytes().last().is_none_or(|b| !is_ident(*b));
        if boundary
            && after_scope.starts_with("use")
            && !after_scope.as_bytes().get(3).is_some_and(|b| is_ident(*b))
            && let Some(end) = after_scope.find(';')
        {
            rest = &after_scope[end + 1..];
        } else {
            kept.push_str("pub");
            rest = &from["pub".len()..];
        }
    }
    kept.push_str(rest);
    kept
}

#[derive(Clone, Copy)]
enum Anchor {
    Crate,
    Super(usize),
    /// `self::x` or a path that starts with a child module declared in the file (`mod x;`).
    Child,
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The identifier starting at `at`, if one does.
fn ident_at(text: &str, at: usize) -> Option<&str> {
    let bytes = text.as_bytes();
    let end = (at..bytes.len())
        .find(|&k| !is_ident(bytes[k]))
        .unwrap_or(bytes.len());
    (end > at).then(|| &text[at..end])
}

fn skip_space(text: &str, mut at: usize) -> usize {
    let bytes = text.as_bytes();
    while at < bytes.len() && bytes[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// The child modules a file declares with `mod name;` (inline modules hold no file).
fn declared_children(text: &str) -> Vec<&str> {
    let mut children = Vec::new();
    let mut search = 0;
    while let Some(found) = text[search..].find("mod ") {
        let at = search + found;
        search = at + 4;
        if at > 0 && is_ident(text.as_bytes()[at - 1]) {
            continue;
        }
        let name_at = skip_space(text, at + 4);
        if let Some(name) = ident_at(text, name_at)
            && text[name_at + name.len()..].trim_start().starts_with(';')
        {
            children.push(name);
        }
    }
    children
}

/// The paths of a use tree starting at `at` (just after a `::`), as name lists, and where it ends.
fn use_tree(text: &str, at: usize) -> (Vec<Vec<String>>, usize) {
    let at = skip_space(text, at);
    if text[at..].starts_with('{') {
        let mut paths = Vec::new();
        let mut next = at + 1;
        loop {
            next = skip_space(text, next);
            match text.as_bytes().get(next) {
                None => return (paths, next),
                Some(b'}') => return (paths, next + 1),
                Some(b',') => next += 1,
                Some(_) => {
                    let (inner, end) = use_tree(text, next);
                    paths.extend(inner);
                    // Skip `as name` and anything else up to the next item.
                    next = end;
                    while let Some(&b) = text.as_bytes().get(next) {
                        if b == b',' || b == b'}' {
                            break;
                        }
                        next += 1;
                    }
                }
            }
        }
    }
    let Some(name) = ident_at(text, at) else {
        return (vec![Vec::new()], at); // `*`
    };
    let end = at + name.len();
    if name == "self" {
        return (vec![Vec::new()], end);
    }
    if text[end..].starts_with("::") {
        let (inner, after) = use_tree(text, end + 2);
        let paths = inner
            .into_iter()
            .map(|mut rest| {
                rest.insert(0, name.to_owned());
                rest
            })
            .collect();
        return (paths, after);
    }
    (vec![vec![name.to_owned()]], end)
}

/// Each path into the crate in `text` (`crate::x::y`, `super::super::x`, `self::x`, `child::x`, with
/// `{..}` groups expanded): its anchor and the names after it.
fn paths_in(text: &str) -> Vec<(Anchor, Vec<String>)> {
    let children = declared_children(text);
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let preceded = i > 0 && (is_ident(bytes[i - 1]) || text[..i].ends_with("::"));
        let Some(word) = ident_at(text, i).filter(|_| !preceded) else {
            i += 1;
            continue;
        };
        let start = i;
        let mut end = i + word.len();
        i = end;
        if !text[end..].starts_with("::") {
            continue;
        }
        let (anchor, tree) = match word {
            "crate" => (Anchor::Crate, end + 2),
            "self" => (Anchor::Child, end + 2),
            "super" => {
                let mut levels = 1;
                while text[end..].starts_with("::super")
                    && !text.as_bytes().get(end + 7).is_some_and(|b| is_ident(*b))
                {
                    levels += 1;
                    end += "::super".len();
                }
                (Anchor::Super(levels), end + 2)
            }
            child if children.contains(&child) => (Anchor::Child, start),
            _ => continue,
        };
        let (paths, after) = use_tree(text, tree);
        i = after.max(i);
        out.extend(
            paths
                .into_iter()
                .filter(|names| !names.is_empty())
                .map(|names| (anchor, names)),
        );
    }
    out
}

/// Tarjan's algorithm, iteratively, over a small graph.
fn strongly_connected(graph: &Graph) -> Vec<Vec<PathBuf>> {
    let nodes: Vec<&PathBuf> = graph.keys().collect();
    let index_of: BTreeMap<&PathBuf, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let arrows: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            graph[*n]
                .iter()
                .filter_map(|t| index_of.get(t).copied())
                .collect()
        })
        .collect();
    let count = nodes.len();
    let mut index = vec![usize::MAX; count];
    let mut low = vec![0; count];
    let mut on_stack = vec![false; count];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut groups = Vec::new();
    for start in 0..count {
        if index[start] != usize::MAX {
            continue;
        }
        // (node, position in its arrows)
        let mut work = vec![(start, 0)];
        index[start] = next;
        low[start] = next;
        next += 1;
        stack.push(start);
        on_stack[start] = true;
        while let Some(&mut (node, ref mut pos)) = work.last_mut() {
            if let Some(&to) = arrows[node].get(*pos) {
                *pos += 1;
                if index[to] == usize::MAX {
                    index[to] = next;
                    low[to] = next;
                    next += 1;
                    stack.push(to);
                    on_stack[to] = true;
                    work.push((to, 0));
                } else if on_stack[to] {
                    low[node] = low[node].min(index[to]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[node]);
            }
            if low[node] == index[node] {
                let mut group = Vec::new();
                while let Some(member) = stack.pop() {
                    on_stack[member] = false;
                    group.push(nodes[member].clone());
                    if member == node {
                        break;
                    }
                }
                group.sort();
                groups.push(group);
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_has_no_module_cycles() {
        // CI runs the tests, not the lint: this keeps the layout's one-way dependencies there.
        let cycles = module_cycles(&root()).unwrap();
        assert!(cycles.is_empty(), "module cycles: {cycles:?}");
    }

    fn write(root: &Path, file: &str, text: &str) {
        let path = root.join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn finds_a_cycle_through_super_and_crate_paths_and_ignores_inline_tests() {
        let dir = std::env::temp_dir().join(format!("xtask-cycles-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        write(&dir, "one/src/lib.rs", "mod a; mod b; mod c;");
        write(&dir, "one/src/a/mod.rs", "use crate::b::Thing;\nmod inner;");
        write(
            &dir,
            "one/src/a/inner.rs",
            "use super::super::c::X; use super::Z;",
        );
        write(
            &dir,
            "one/src/b.rs",
            "pub struct Thing; use crate::a::inner::Y;",
        );
        write(
            &dir,
            "one/src/c.rs",
            "pub struct X;\n#[cfg(test)]\nmod tests {\n use crate::a::Z;\n}",
        );
        // A parent importing from its child (a relative path and a `{..}` group) while the child
        // uses what the parent defines is a cycle too.
        write(&dir, "three/src/lib.rs", "mod p;");
        write(
            &dir,
            "three/src/p/mod.rs",
            "mod q;\npub use q::Q;\nuse q::{self as r, Q2};\npub struct P;",
        );
        write(
            &dir,
            "three/src/p/q.rs",
            "use super::{P, super::Root};\npub struct Q;",
        );
        // A re-export is not a dependency: this parent and child make no cycle.
        write(&dir, "four/src/lib.rs", "mod t;");
        write(
            &dir,
            "four/src/t/mod.rs",
            "mod i;\npub(crate) use i::Impl;\npub use self::i::{Other};\n/// Implemented by [`i::Impl`](self::i::Impl).\npub trait T {}",
        );
        write(&dir, "four/src/t/i.rs", "use super::T;\npub struct Impl;");
        write(&dir, "two/src/lib.rs", "use crate::x::Y; mod x;");
        write(&dir, "two/src/x.rs", "use crate::Y;");
        let cycles = module_cycles(&dir).unwrap();
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(
            cycles,
            vec![
                vec![
                    PathBuf::from("one/src/a/inner.rs"),
                    PathBuf::from("one/src/a/mod.rs"),
                    PathBuf::from("one/src/b.rs"),
                ],
                vec![
                    PathBuf::from("three/src/p/mod.rs"),
                    PathBuf::from("three/src/p/q.rs"),
                ]
            ],
        );
    }
}
