//! Where a data directory's entity state lives, remembered beside it: the partition count it
//! was written with (`<data dir>/layout`). With the plane on, an entity's state is in its
//! partition's replica and the node's own tables are never read for it; with the plane off it
//! is in those tables. A node whose config names another count than its data was written with
//! would serve every entity as new while the state sits unread, so it refuses to start and
//! says which count to set. Data written before this file existed, by a node whose config
//! left the count to its default, was written with the plane off (the default then) unless a
//! partition's journal is there; a count the config sets is taken as the one it was written
//! with.

use crate::node::NodeError;
use std::path::{Path, PathBuf};
use tessera_sharding::PartitionConfig;

/// The file's one line: `partitions = N`.
const LAYOUT_KEY: &str = "partitions";

/// Checks the partition count in force (`partitions`, resolved) against the one `data_dir`
/// was written with, and records it there if none is recorded yet.
pub(in crate::node) fn check_layout(
    data_dir: &Path,
    partitions: &PartitionConfig,
) -> Result<(), NodeError> {
    let count = partitions.count();
    let configured = !partitions.defaulted;
    let path = layout_file(data_dir);
    let written = match std::fs::read_to_string(&path) {
        Ok(text) => Some(parse(&text).ok_or_else(|| {
            NodeError::Config(format!(
                "{} does not read `{LAYOUT_KEY} = <count>`: it names the partition count \
                 this data directory was written with",
                path.display()
            ))
        })?),
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(NodeError::DataDir {
                path: path.clone(),
                source: error,
            });
        }
        Err(_) if configured => None,
        Err(_) => written_before_layout(data_dir),
    };
    match written {
        Some(written) if written != count => Err(NodeError::Config(mismatch(
            data_dir, written, count, configured,
        ))),
        Some(_) => Ok(()),
        None => std::fs::write(&path, format!("{LAYOUT_KEY} = {count}\n"))
            .map_err(|source| NodeError::DataDir { path, source }),
    }
}

fn mismatch(data_dir: &Path, written: u32, count: u32, configured: bool) -> String {
    let source = if configured {
        "this node's config sets"
    } else {
        "the default for this node is"
    };
    let off = if written == 0 {
        " (the plane off: each owner's state on its own disk)"
    } else {
        ""
    };
    format!(
        "{} was written with sharding.partitions.count = {written}{off}, and {source} {count}: \
         where each entity's state lives depends on it, so the node would not find its state. \
         Set `[sharding.partitions] count = {written}` to serve it as it is, or back the \
         cluster up and restore it into one with the count you want (docs/backup.md); a \
         development cluster of `tessera up --nodes N` starts afresh once its directory \
         (./.tessera) is removed",
        data_dir.display()
    )
}

/// The count a data directory from before the layout file was written with, when the config
/// leaves the count to its default: 0 if it holds a cluster node's data and no partition
/// group's journal (the plane was off, the default then); unknown otherwise.
fn written_before_layout(data_dir: &Path) -> Option<u32> {
    if !data_dir.join("cluster").exists() {
        return None;
    }
    let journals = std::fs::read_dir(data_dir.join("partitions"))
        .map(|entries| {
            entries.flatten().any(|entry| {
                entry
                    .file_name()
                    .to_str()
                    .is_some_and(|name| name.ends_with(".journal"))
            })
        })
        .unwrap_or(false);
    (!journals).then_some(0)
}

fn parse(text: &str) -> Option<u32> {
    let (key, value) = text.trim().split_once('=')?;
    (key.trim() == LAYOUT_KEY).then_some(())?;
    value.trim().parse().ok()
}

fn layout_file(data_dir: &Path) -> PathBuf {
    data_dir.join("layout")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sharding::PARTITIONS_CLUSTER_DEFAULT as DEFAULT;

    fn partitions(count: Option<u32>) -> PartitionConfig {
        let mut partitions = PartitionConfig {
            count,
            ..PartitionConfig::default()
        };
        partitions.resolve(true);
        partitions
    }

    fn refusal(data_dir: &Path, config: &PartitionConfig) -> String {
        match check_layout(data_dir, config) {
            Err(NodeError::Config(why)) => why,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_new_data_directory_records_its_count_and_is_held_to_it() {
        let dir = tempfile::tempdir().unwrap();
        check_layout(dir.path(), &partitions(None)).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("layout")).unwrap(),
            format!("partitions = {DEFAULT}\n")
        );
        check_layout(dir.path(), &partitions(None)).unwrap();
        check_layout(dir.path(), &partitions(Some(DEFAULT))).unwrap();
        let why = refusal(dir.path(), &partitions(Some(0)));
        assert!(
            why.contains(&format!(
                "written with sharding.partitions.count = {DEFAULT}"
            )),
            "{why}"
        );
        assert!(why.contains("config sets 0"), "{why}");
    }

    #[test]
    fn a_cluster_node_from_before_the_default_changed_keeps_the_plane_off_until_told() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cluster"), "test").unwrap();
        std::fs::create_dir(dir.path().join("partitions")).unwrap();
        let why = refusal(dir.path(), &partitions(None));
        assert!(why.contains("count = 0 (the plane off"), "{why}");
        assert!(
            why.contains(&format!("the default for this node is {DEFAULT}")),
            "{why}"
        );
        assert!(
            !dir.path().join("layout").exists(),
            "a refusal records nothing"
        );
        check_layout(dir.path(), &partitions(Some(0))).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("layout")).unwrap(),
            "partitions = 0\n"
        );
    }

    #[test]
    fn data_with_partition_journals_or_an_explicit_count_is_taken_at_its_word() {
        let with_journals = tempfile::tempdir().unwrap();
        std::fs::write(with_journals.path().join("cluster"), "test").unwrap();
        std::fs::create_dir(with_journals.path().join("partitions")).unwrap();
        std::fs::write(with_journals.path().join("partitions/p0.journal"), b"").unwrap();
        check_layout(with_journals.path(), &partitions(None)).unwrap();

        let explicit = tempfile::tempdir().unwrap();
        std::fs::write(explicit.path().join("cluster"), "test").unwrap();
        check_layout(explicit.path(), &partitions(Some(6))).unwrap();
        assert!(refusal(explicit.path(), &partitions(None)).contains("count = 6"));
    }

    #[test]
    fn a_layout_file_that_does_not_parse_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("layout"), "shards = 12\n").unwrap();
        assert!(refusal(dir.path(), &partitions(None)).contains("does not read"));
    }
}
