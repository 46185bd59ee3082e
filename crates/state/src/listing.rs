//! Which entities of a type this node's database knows: the ids that have state (an
//! `entity_meta` row with bytes) or are remembered, merged into one stream in id order with
//! each id once. [`StateStore::entity_ids`] reads one page of it after a cursor,
//! [`StateStore::entity_count`] counts it; both through one read transaction (a snapshot) and a
//! predicate over ids that says which entities the caller answers for (in a cluster, those of
//! the shards its node owns), since the state layer does not know the shard function.
//!
//! Remembered ids are keyed by shard first, so each shard that holds some is its own sorted
//! source; a heap merges the sources lazily, so a page reads about as many rows as it returns
//! plus one per source.

use super::error::StoreError;
use super::tables::{ENTITY_META, REMEMBERED_ENTITIES, StateStore, remembered_shards_in};
use redb::{ReadTransaction, ReadableDatabase};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Bound;
use tessera_contract::TypeKey;

/// One sorted source of ids.
type Ids<'a> = Box<dyn Iterator<Item = Result<String, StoreError>> + 'a>;

impl StateStore {
    /// Up to `limit` ids of `type_key`'s entities that have state or are remembered, strictly
    /// after `after` (from the first when `None`), in id order, each once, among the ids
    /// `answers_for` accepts. Remembered ids are those the write-behind queue has flushed.
    ///
    /// ```
    /// use tessera_contract::{EntityAddress, TypeKey};
    /// use tessera_state::{StateStore, WriteSet};
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = StateStore::open(&dir.path().join("tessera.redb")).unwrap();
    /// for id in ["c", "a", "b"] {
    ///     let mut writes = WriteSet::new(EntityAddress::new("t", "counter", id));
    ///     writes.put("value", vec![1]);
    ///     store.commit_one(&writes).unwrap();
    /// }
    /// let counters = TypeKey::new("t", "counter");
    /// let all = |_: &str| true;
    /// assert_eq!(store.entity_ids(&counters, None, 2, &all).unwrap(), ["a", "b"]);
    /// assert_eq!(store.entity_ids(&counters, Some("b"), 2, &all).unwrap(), ["c"]);
    /// assert_eq!(store.entity_count(&counters, &all).unwrap(), 3);
    /// ```
    pub fn entity_ids(
        &self,
        type_key: &TypeKey,
        after: Option<&str>,
        limit: usize,
        answers_for: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<String>, StoreError> {
        entity_ids_across(
            std::slice::from_ref(self),
            type_key,
            after,
            limit,
            answers_for,
        )
    }

    /// How many ids [`entity_ids`](Self::entity_ids) would list from the first, without a
    /// limit: a walk over every such id of the type.
    pub fn entity_count(
        &self,
        type_key: &TypeKey,
        answers_for: &dyn Fn(&str) -> bool,
    ) -> Result<u64, StoreError> {
        entity_count_across(std::slice::from_ref(self), type_key, answers_for)
    }
}

/// [`StateStore::entity_ids`] over several databases at once (a node's own and the replicas
/// of the partitions it holds): each id once, whichever databases know it.
pub fn entity_ids_across(
    stores: &[StateStore],
    type_key: &TypeKey,
    after: Option<&str>,
    limit: usize,
    answers_for: &dyn Fn(&str) -> bool,
) -> Result<Vec<String>, StoreError> {
    let transactions = read_all(stores)?;
    let mut all = Vec::new();
    for transaction in &transactions {
        all.extend(sources(transaction, type_key, after, answers_for)?);
    }
    Merged::new(all)?.take(limit).collect()
}

/// [`StateStore::entity_count`] over several databases at once: each id counted once.
pub fn entity_count_across(
    stores: &[StateStore],
    type_key: &TypeKey,
    answers_for: &dyn Fn(&str) -> bool,
) -> Result<u64, StoreError> {
    let transactions = read_all(stores)?;
    let mut all = Vec::new();
    for transaction in &transactions {
        all.extend(sources(transaction, type_key, None, answers_for)?);
    }
    let mut count = 0;
    for id in Merged::new(all)? {
        id?;
        count += 1;
    }
    Ok(count)
}

/// A read transaction (a snapshot) of each store.
fn read_all(stores: &[StateStore]) -> Result<Vec<ReadTransaction>, StoreError> {
    stores
        .iter()
        .map(|store| store.database().begin_read().map_err(StoreError::io))
        .collect()
}

/// The sorted sources of a type's ids: one over the ids with state, one per shard holding
/// remembered ids.
fn sources<'a>(
    transaction: &'a ReadTransaction,
    type_key: &'a TypeKey,
    after: Option<&'a str>,
    answers_for: &'a dyn Fn(&str) -> bool,
) -> Result<Vec<Ids<'a>>, StoreError> {
    let (tenant, entity_type) = (type_key.tenant.as_str(), type_key.entity_type.as_str());
    let metas = transaction
        .open_table(ENTITY_META)
        .map_err(StoreError::io)?;
    let start = match after {
        Some(after) => Bound::Excluded((tenant, entity_type, after)),
        None => Bound::Included((tenant, entity_type, "")),
    };
    let mut rows = metas
        .range::<(&str, &str, &str)>((start, Bound::Unbounded))
        .map_err(StoreError::io)?;
    let with_state: Ids<'a> = Box::new(std::iter::from_fn(move || {
        loop {
            let (key, meta) = match rows.next()? {
                Ok(row) => row,
                Err(error) => return Some(Err(StoreError::io(error))),
            };
            let (found_tenant, found_type, id) = key.value();
            if (found_tenant, found_type) != (tenant, entity_type) {
                return None;
            }
            let (_, state_bytes) = meta.value();
            if state_bytes > 0 && answers_for(id) {
                return Some(Ok(id.to_string()));
            }
        }
    }));
    let mut sources = vec![with_state];
    let remembered = transaction
        .open_table(REMEMBERED_ENTITIES)
        .map_err(StoreError::io)?;
    for shard in remembered_shards_in(&remembered, type_key)? {
        let start = match after {
            Some(after) => Bound::Excluded((tenant, entity_type, shard, after)),
            None => Bound::Included((tenant, entity_type, shard, "")),
        };
        let mut rows = remembered
            .range::<(&str, &str, u32, &str)>((start, Bound::Unbounded))
            .map_err(StoreError::io)?;
        sources.push(Box::new(std::iter::from_fn(move || {
            loop {
                let (key, ()) = match rows.next()? {
                    Ok((key, value)) => (key, value.value()),
                    Err(error) => return Some(Err(StoreError::io(error))),
                };
                let (found_tenant, found_type, found_shard, id) = key.value();
                if (found_tenant, found_type, found_shard) != (tenant, entity_type, shard) {
                    return None;
                }
                if answers_for(id) {
                    return Some(Ok(id.to_string()));
                }
            }
        })));
    }
    Ok(sources)
}

/// Sorted sources merged into one sorted stream, each id once: the heap holds the next id of
/// every source not yet exhausted.
struct Merged<'a> {
    sources: Vec<std::iter::Fuse<Ids<'a>>>,
    heap: BinaryHeap<Reverse<(String, usize)>>,
    last: Option<String>,
}

impl<'a> Merged<'a> {
    fn new(sources: Vec<Ids<'a>>) -> Result<Self, StoreError> {
        let mut merged = Merged {
            sources: sources.into_iter().map(Iterator::fuse).collect(),
            heap: BinaryHeap::new(),
            last: None,
        };
        for index in 0..merged.sources.len() {
            merged.refill(index)?;
        }
        Ok(merged)
    }

    /// Puts source `index`'s next id on the heap, if it has one.
    fn refill(&mut self, index: usize) -> Result<(), StoreError> {
        if let Some(next) = self.sources[index].next() {
            self.heap.push(Reverse((next?, index)));
        }
        Ok(())
    }
}

impl Iterator for Merged<'_> {
    type Item = Result<String, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        // Equal ids of different sources leave the heap one after the other.
        while let Some(Reverse((id, index))) = self.heap.pop() {
            if let Err(error) = self.refill(index) {
                return Some(Err(error));
            }
            if self.last.as_ref() != Some(&id) {
                self.last = Some(id.clone());
                return Some(Ok(id));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WriteSet;
    use crate::remember::{RememberOp, RememberedId};
    use crate::tables::apply_remember_ops;
    use tessera_contract::EntityAddress;

    fn put(store: &StateStore, tenant: &str, entity_type: &str, id: &str) {
        let mut writes = WriteSet::new(EntityAddress::new(tenant, entity_type, id));
        writes.put("value", vec![1]);
        store.commit_one(&writes).unwrap();
    }

    fn remember(store: &StateStore, type_key: &TypeKey, shard: u32, id: &str) {
        let op = RememberOp::Started(RememberedId {
            type_key: type_key.clone(),
            shard,
            id: id.into(),
        });
        let transaction = store.database().begin_write().unwrap();
        apply_remember_ops(&transaction, std::iter::once(&op)).unwrap();
        transaction.commit().unwrap();
    }

    /// Ids with state, remembered ids of several shards and ids that are both come out once
    /// each in id order; an entity whose state was deleted, other types and other tenants do
    /// not.
    #[test]
    fn state_and_remembered_ids_merge_in_order_each_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("tessera.redb")).unwrap();
        let counter = TypeKey::new("t", "counter");
        for id in ["d", "b", "both"] {
            put(&store, "t", "counter", id);
        }
        put(&store, "t", "counters", "x");
        put(&store, "u", "counter", "y");
        put(&store, "t", "counter", "emptied");
        let mut delete = WriteSet::new(EntityAddress::new("t", "counter", "emptied"));
        delete.delete("value");
        store.commit_one(&delete).unwrap();
        remember(&store, &counter, 9, "a");
        remember(&store, &counter, 2, "c");
        remember(&store, &counter, 2, "both");
        remember(&store, &counter, 5, "e");
        remember(&store, &TypeKey::new("t", "other"), 1, "z");
        let all = |_: &str| true;

        let everything = store.entity_ids(&counter, None, 100, &all).unwrap();
        assert_eq!(everything, ["a", "b", "both", "c", "d", "e"]);
        assert_eq!(store.entity_count(&counter, &all).unwrap(), 6);

        let mut pages = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = store
                .entity_ids(&counter, after.as_deref(), 4, &all)
                .unwrap();
            let Some(last) = page.last().cloned() else {
                break;
            };
            pages.push(page);
            after = Some(last);
        }
        assert_eq!(pages, [vec!["a", "b", "both", "c"], vec!["d", "e"]]);
    }

    /// Only the ids the predicate answers for are listed and counted.
    #[test]
    fn the_predicate_picks_the_ids_listed() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("tessera.redb")).unwrap();
        let counter = TypeKey::new("t", "counter");
        for id in ["a1", "b1", "a2"] {
            put(&store, "t", "counter", id);
        }
        remember(&store, &counter, 3, "a3");
        remember(&store, &counter, 3, "b2");
        let only_a = |id: &str| id.starts_with('a');
        assert_eq!(
            store.entity_ids(&counter, None, 10, &only_a).unwrap(),
            ["a1", "a2", "a3"]
        );
        assert_eq!(store.entity_count(&counter, &only_a).unwrap(), 3);
    }
}
