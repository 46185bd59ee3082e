//! No import cycles between the source files of any crate, checked: what Cargo cannot see
//! (it forbids cycles between crates, not between one crate's modules). Reads every file of each
//! crate under `crates/` and of `sim/`, finds the paths it names (`crate::…`, `super::…`,
//! `self::…` and its own child modules, `use` groups included), resolves each to the file that
//! defines the longest prefix of it, and looks for strongly connected files. A re-export
//! (`pub use`) is not an import of the file that makes it: a path through it resolves to the
//! file it re-exports from. A file naming one of its ancestor modules (a child reading its
//! parent's items) is not counted, a parent owning its children, and neither is a file's inline
//! `mod tests`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `directory`, into `files`.
fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// The module path (`["entity", "cell"]`) of each source file.
struct Modules {
    files: BTreeMap<Vec<String>, PathBuf>,
}

impl Modules {
    fn read(source: &Path) -> Modules {
        let mut paths = Vec::new();
        rust_files(source, &mut paths);
        let mut files = BTreeMap::new();
        for path in paths {
            let relative = path
                .strip_prefix(source)
                .expect("a file under the source root");
            let mut module: Vec<String> = relative
                .iter()
                .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
                .collect();
            if module.first().is_some_and(|first| first == "bin") {
                continue;
            }
            if module
                .last()
                .is_some_and(|last| last == "mod" || last == "lib")
            {
                module.pop();
            }
            if module.last().is_some_and(|last| last == "main") {
                continue;
            }
            files.insert(module, path);
        }
        Modules { files }
    }

    /// The file defining the longest prefix of `path`.
    fn file_of(&self, path: &[String]) -> Option<&Vec<String>> {
        (0..=path.len()).rev().find_map(|length| {
            self.files
                .get_key_value(&path[..length])
                .map(|(key, _)| key)
        })
    }
}

fn is_identifier(character: char) -> bool {
    character.is_alphanumeric() || character == '_'
}

fn skip_space(text: &str, at: usize) -> usize {
    let rest = &text[at..];
    at + (rest.len() - rest.trim_start().len())
}

/// The paths `text[at..]` names: `a::b::{c, d::e}` gives `[a, b, c]` and `[a, b, d, e]`.
/// Returns where they end.
fn paths_at(text: &str, at: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    let mut at = skip_space(text, at);
    loop {
        if text[at..].starts_with('{') {
            at += 1;
            loop {
                at = skip_space(text, at);
                if text[at..].starts_with('}') {
                    return at + 1;
                }
                at = skip_space(text, paths_at(text, at, path.clone(), out));
                if let Some(alias) = text[at..].strip_prefix("as ") {
                    let alias = alias.trim_start();
                    let length = alias
                        .find(|c: char| !is_identifier(c))
                        .unwrap_or(alias.len());
                    at = skip_space(text, text.len() - alias.len() + length);
                }
                if text[at..].starts_with(',') {
                    at += 1;
                } else if text[at..].starts_with('}') {
                    return at + 1;
                } else {
                    return at;
                }
            }
        }
        let rest = &text[at..];
        let length = rest.find(|c: char| !is_identifier(c)).unwrap_or(rest.len());
        if length == 0 {
            out.push(path);
            return at;
        }
        path.push(rest[..length].to_owned());
        at += length;
        if text[at..].starts_with("::") {
            at += 2;
        } else {
            out.push(path);
            return at;
        }
    }
}

/// The module paths `text` (the file of `module`) names, made absolute.
/// What one file names: the paths its code uses, and the names it re-exports (`pub use`),
/// each with the absolute path it stands for.
struct Named {
    uses: Vec<Vec<String>>,
    reexports: BTreeMap<String, Vec<String>>,
}

/// `code` with its re-export statements (`pub use …;`, `pub(crate) use …;`) cut out, and those
/// statements.
fn split_reexports(code: &str) -> (String, Vec<String>) {
    let mut rest = String::with_capacity(code.len());
    let mut reexports = Vec::new();
    let mut at = 0;
    while let Some(found) = ["pub use ", "pub(crate) use ", "pub(super) use "]
        .iter()
        .filter_map(|opening| code[at..].find(opening).map(|offset| at + offset))
        .min()
    {
        let end = code[found..]
            .find(';')
            .map_or(code.len(), |offset| found + offset + 1);
        rest.push_str(&code[at..found]);
        let statement = &code[found..end];
        let keyword = statement.find("use ").map_or(0, |offset| offset + 4);
        reexports.push(statement[keyword..].trim_end_matches(';').to_owned());
        at = end;
    }
    rest.push_str(&code[at..]);
    (rest, reexports)
}

fn named_paths(module: &[String], text: &str) -> Named {
    // A file's own tests (an inline `mod tests` at its end) are not what it imports.
    let text = text
        .split("#[cfg(test)]\nmod tests {")
        .next()
        .unwrap_or(text);
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let (code, reexport_statements) = split_reexports(&code);
    let children: BTreeSet<String> = code
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("pub ").unwrap_or(line);
            let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
            let line = line.strip_prefix("pub(super) ").unwrap_or(line);
            line.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_owned)
        })
        .collect();
    // `super` is the module's parent, whether the module is a `mod.rs` or an `x.rs`.
    let own = module.to_vec();
    let parent = module[..module.len().saturating_sub(1)].to_vec();
    let uses = absolute_paths(&code, &own, &parent, &children);
    let mut reexports = BTreeMap::new();
    for statement in reexport_statements {
        for path in absolute_paths(&statement, &own, &parent, &children) {
            // `a::b::{self}` re-exports `b`; anything else its last segment.
            if let Some(name) = path.last() {
                reexports.insert(name.clone(), path);
            }
        }
    }
    Named { uses, reexports }
}

/// The paths `code` names, made absolute: `crate::`, `super::` (`parent`), `self::` (`own`)
/// and the file's own child modules. Other paths (external crates, names a `use` brought in)
/// are not followed.
fn absolute_paths(
    code: &str,
    own: &[String],
    parent: &[String],
    children: &BTreeSet<String>,
) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let Some(character) = code[at..].chars().next() else {
            break;
        };
        let boundary = at == 0
            || code[..at]
                .chars()
                .next_back()
                .is_some_and(|before| !is_identifier(before) && before != ':');
        if !(boundary && is_identifier(character)) {
            at += character.len_utf8();
            continue;
        }
        let rest = &code[at..];
        let word = &rest[..rest.find(|c: char| !is_identifier(c)).unwrap_or(rest.len())];
        let base = match word {
            "crate" => Some(Vec::new()),
            "super" => Some(parent.to_vec()),
            "self" => Some(own.to_vec()),
            child if children.contains(child) => Some(own.to_vec()),
            _ => None,
        };
        let after = at + word.len();
        match base {
            Some(mut base) if code[after..].starts_with("::") => {
                if children.contains(word) {
                    base.push(word.to_owned());
                }
                let mut found = Vec::new();
                at = paths_at(code, after + 2, Vec::new(), &mut found);
                for relative in found {
                    let mut absolute = base.clone();
                    for segment in relative {
                        if segment == "super" {
                            absolute.pop();
                        } else if segment != "self" {
                            absolute.push(segment);
                        }
                    }
                    paths.push(absolute);
                }
            }
            _ => at = after,
        }
    }
    paths
}

/// The file that defines what `path` names: the file of its longest prefix, or, when that file
/// only re-exports the name, the file it re-exports it from.
fn defining_file(
    modules: &Modules,
    named: &BTreeMap<Vec<String>, Named>,
    path: &[String],
) -> Option<Vec<String>> {
    let mut path = path.to_vec();
    // Re-exports of re-exports are followed a few steps deep.
    for _ in 0..8 {
        let file = modules.file_of(&path)?.clone();
        let Some(name) = path.get(file.len()) else {
            return Some(file);
        };
        match named.get(&file).and_then(|file| file.reexports.get(name)) {
            Some(target) if target.as_slice() != &path[..=file.len()] => {
                let mut next = target.clone();
                next.extend_from_slice(&path[file.len() + 1..]);
                path = next;
            }
            _ => return Some(file),
        }
    }
    modules.file_of(&path).cloned()
}

/// The cycles between the files of the crate whose sources are under `source`, each described
/// by the imports that close it.
fn cycles_in(source: &Path) -> Vec<String> {
    let modules = Modules::read(source);
    let named: BTreeMap<Vec<String>, Named> = modules
        .files
        .iter()
        .map(|(module, file)| {
            let text = std::fs::read_to_string(file).expect("a readable source file");
            (module.clone(), named_paths(module, &text))
        })
        .collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, names) in &named {
        let targets = edges.entry(module.clone()).or_default();
        for path in &names.uses {
            let Some(target) = defining_file(&modules, &named, path) else {
                continue;
            };
            // A file naming itself or an ancestor module (a parent owns its children).
            if module.starts_with(&target) {
                continue;
            }
            targets.insert(target);
        }
    }
    strongly_connected(&edges)
        .iter()
        .map(|files| {
            let mut lines = Vec::new();
            for file in files {
                for target in &edges[file] {
                    if files.contains(target) {
                        lines.push(format!("  {} -> {}", file.join("::"), target.join("::")));
                    }
                }
            }
            lines.join("\n")
        })
        .collect()
}

/// The source folder of every crate of the workspace that this check covers.
fn crate_sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the workspace root")
        .to_path_buf();
    let mut sources: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("the crates folder exists")
        .flatten()
        .map(|entry| entry.path().join("src"))
        .filter(|source| source.is_dir())
        .collect();
    sources.push(root.join("sim").join("src"));
    sources.sort();
    sources
}

#[test]
fn no_import_cycles_between_the_source_files_of_any_crate() {
    let sources = crate_sources();
    assert!(sources.len() >= 10, "too few crates found: {sources:?}");
    let mut found = Vec::new();
    for source in &sources {
        for cycle in cycles_in(source) {
            found.push(format!("{}:\n{cycle}", source.display()));
        }
    }
    assert!(
        found.is_empty(),
        "import cycles between source files:\n{}",
        found.join("\n\n")
    );
}

#[test]
fn a_cycle_between_two_files_is_found() {
    let crate_dir = tempfile::tempdir().expect("a temporary directory");
    let source = crate_dir.path();
    std::fs::write(source.join("lib.rs"), "mod a;\nmod b;\n").expect("writable");
    std::fs::write(source.join("a.rs"), "use crate::b::B;\npub struct A;\n").expect("writable");
    std::fs::write(source.join("b.rs"), "use super::a::A;\npub struct B;\n").expect("writable");
    let cycles = cycles_in(source);
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(
        cycles[0].contains("a -> b") && cycles[0].contains("b -> a"),
        "{cycles:?}"
    );
    std::fs::write(source.join("b.rs"), "pub struct B;\n").expect("writable");
    assert!(cycles_in(source).is_empty());
}

/// The strongly connected sets of more than one node (Tarjan's algorithm).
fn strongly_connected(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<BTreeSet<Vec<String>>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        found: Vec<BTreeSet<Vec<String>>>,
    }
    fn visit<'a>(walk: &mut Walk<'a>, node: &'a Vec<String>) {
        let next = walk.index.len();
        walk.index.insert(node, next);
        walk.low.insert(node, next);
        walk.stack.push(node);
        walk.on_stack.insert(node);
        let edges = walk.edges;
        for target in edges.get(node).into_iter().flatten() {
            if !walk.index.contains_key(target) {
                visit(walk, target);
                let low = walk.low[node].min(walk.low[target]);
                walk.low.insert(node, low);
            } else if walk.on_stack.contains(target) {
                let low = walk.low[node].min(walk.index[target]);
                walk.low.insert(node, low);
            }
        }
        if walk.low[node] == walk.index[node] {
            let mut component = BTreeSet::new();
            while let Some(member) = walk.stack.pop() {
                walk.on_stack.remove(member);
                component.insert(member.clone());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                walk.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node) {
            visit(&mut walk, node);
        }
    }
    walk.found
}
