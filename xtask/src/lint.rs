//! `cargo xtask lint`: formatting, clippy, unused dependencies and module cycles.
//!
//! Module cycles are found from the source text: every `crate::a::b` and `super::a` path in a
//! file is an arrow from that file to the deepest module file it names, and a strongly connected
//! group of two or more files is a cycle. Arrows to the crate root (`lib.rs`, `main.rs`) do not
//! count (the root re-exports everything), nor do inline `#[cfg(test)] mod tests` blocks or
//! binaries under `src/bin/`. It reads text, not the compiler's view, so a path in a comment or a
//! string counts too; that errs on the side of reporting.

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
    cycles()
}

/// Fails when a crate of the workspace has a module cycle, naming each.
pub(crate) fn cycles() -> Result {
    let cycles = module_cycles(&root())?;
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
        for (anchor, segments) in paths_in(without_inline_tests(&text)) {
            let mut module = match anchor {
                Anchor::Crate => Vec::new(),
                Anchor::Super(levels) => {
                    let keep = here.len().saturating_sub(levels);
                    here[..keep].to_vec()
                }
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

enum Anchor {
    Crate,
    Super(usize),
}

/// Each `crate::x::y` / `super::super::x` path in `text`: its anchor and the names after it.
fn paths_in(text: &str) -> Vec<(Anchor, Vec<String>)> {
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && ident(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        let word = &text[start..i];
        if word != "crate" && word != "super" {
            continue;
        }
        let mut names: Vec<&str> = vec![word];
        while text[i..].starts_with("::") {
            let begin = i + 2;
            let mut end = begin;
            while end < bytes.len() && ident(bytes[end]) {
                end += 1;
            }
            if end == begin {
                break;
            }
            names.push(&text[begin..end]);
            i = end;
        }
        if names.len() < 2 {
            continue;
        }
        let anchor = if names[0] == "crate" {
            names.remove(0);
            Anchor::Crate
        } else {
            let levels = names.iter().take_while(|n| **n == "super").count();
            names.drain(..levels);
            Anchor::Super(levels)
        };
        out.push((anchor, names.into_iter().map(str::to_owned).collect()));
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
        write(&dir, "two/src/lib.rs", "use crate::x::Y; mod x;");
        write(&dir, "two/src/x.rs", "use crate::Y;");
        let cycles = module_cycles(&dir).unwrap();
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(
            cycles,
            vec![vec![
                PathBuf::from("one/src/a/inner.rs"),
                PathBuf::from("one/src/a/mod.rs"),
                PathBuf::from("one/src/b.rs"),
            ]],
        );
    }
}
