//! The layer order, checked: a module never imports one above it. Reads the source files and
//! looks for `crate::<layer>` paths that point upward.

use std::path::{Path, PathBuf};

/// Each layer and the layers above it, which it must not name.
const FORBIDDEN: &[(&str, &[&str])] = &[
    (
        "contract",
        &[
            "codec",
            "state",
            "metadata",
            "runtime",
            "entity",
            "sharding",
            "node",
            "api",
            "cli",
            "consensus",
            "cluster",
        ],
    ),
    (
        "codec",
        &[
            "state", "metadata", "runtime", "entity", "sharding", "node", "api", "cli", "cluster",
        ],
    ),
    (
        "state",
        &[
            "metadata", "runtime", "entity", "sharding", "node", "api", "cli",
        ],
    ),
    (
        "metadata",
        &[
            "state", "runtime", "entity", "sharding", "node", "api", "cli",
        ],
    ),
    (
        "runtime",
        &["metadata", "entity", "sharding", "node", "api", "cli"],
    ),
    ("entity", &["metadata", "sharding", "node", "api", "cli"]),
    ("sharding", &["node", "api", "cli"]),
    ("node", &["api", "cli"]),
    ("api", &["cli"]),
    (
        "consensus",
        &[
            "state", "metadata", "runtime", "entity", "sharding", "node", "api", "cli",
        ],
    ),
    (
        "cluster",
        &[
            "state", "metadata", "runtime", "entity", "sharding", "node", "api", "cli",
        ],
    ),
];

/// Every `.rs` file under `directory`, into `files`.
pub(crate) fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
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

#[test]
fn no_layer_imports_one_above_it() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    for (layer, above) in FORBIDDEN {
        let mut files = Vec::new();
        rust_files(&source.join(layer), &mut files);
        assert!(!files.is_empty(), "layer {layer} has no source files");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            for higher in *above {
                let path = format!("crate::{higher}::");
                let import = format!("crate::{higher}::{{");
                if text.contains(&path) || text.contains(&import) {
                    violations.push(format!("{} names crate::{higher}", file.display()));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports up the layer order:\n{}",
        violations.join("\n")
    );
}
