//! The node's side of backups (`crate::backup`, `docs/backup.md`). A backup is planned on one
//! node — the catalog cut at one commit after a barrier, and who owns each shard
//! ([`Node::backup_plan`]) — and each owner streams its shards ([`Node::backup_shards`]), each
//! read from one redb read transaction, the same snapshot a handoff sends. A restore creates
//! tenants with their token hashes, deploys each version from its plugin bytes, and installs
//! each shard part on whichever node owns the shard in the restoring cluster
//! ([`Node::restore_shard`]), as a handoff installs it. With the partition plane serving, a
//! shard is read from its owner's replica of its partition and restored through that
//! partition's group (`docs/partitions.md`). A tenant token sees and writes only its
//! own tenant: the callers pass the tenant its token names, never one from a body.

use super::{Node, NodeError, Principal};
use crate::backup::{
    BackupPlan, PlannedNode, PlannedShard, Record, ShardRecord, ShardRestored, Summary,
    encode_frame,
};
use std::sync::Arc;
use std::time::Duration;
use tessera_contract::{EntityAddress, ShardKey, TypeKey};
use tessera_metadata::{Command, MemberState, Tenant, TypeRecord, VersionRecord, blob_name};
use tessera_sharding::{FnvExtractor, ShardExtractor};
use tessera_state::{ShardPart, ShardScope, ShardStates};
use tokio::sync::mpsc;

/// Frames of a shard stream queued between the thread reading the snapshot and the response:
/// with parts of at most 4 MiB, a stream holds at most 16 MiB however large the node's shards.
pub const BACKUP_FRAMES_QUEUED_MAX: usize = 4;

/// How long a restored part waits for its shard to be allocated and served here (the first
/// part of a shard allocates it, as a first message would).
const RESTORE_ALLOCATION_WAIT: Duration = Duration::from_secs(15);

/// How far a restored entity's next outbox sequence number leaps past the one it was backed
/// up with. Shards are read one after another, so a receiver's snapshot may hold the receipt of
/// a tell its sender committed after the sender's own snapshot; receivers drop every tell at
/// or below the highest sequence they hold from a sender, so without the leap the restored
/// sender's next tells to it would be dropped as duplicates. No sender commits 2^32 tells
/// while a backup runs; a sequence has room for 2^32 restores.
pub const RESTORE_SEQUENCE_LEAP: u64 = 1 << 32;

/// The pause between two looks at a shard being allocated.
const RESTORE_ALLOCATION_POLL: Duration = Duration::from_millis(20);

/// One frame of a shard stream, or why the stream stops.
pub type BackupFrame = Result<Vec<u8>, NodeError>;

impl Node {
    /// The partition `key`'s entity state lives in, while the partition plane serves: its
    /// shards are backed up from, and restored into, this node's replica of it.
    fn partition_of(&self, key: &ShardKey) -> Option<u32> {
        self.partition_map
            .of_shard(key)
            .filter(|_| self.config.cluster.is_some())
    }

    /// `key`'s parts, from one snapshot of where its entities live: this node's tables, or,
    /// for a partitioned shard, this node's replica of its partition — the owner's, which
    /// has applied every write the owner acknowledged — followed by the ids remembered in this
    /// node's own tables, numbered on as one sequence.
    fn shard_parts(
        &self,
        key: &ShardKey,
    ) -> Result<Box<dyn Iterator<Item = Result<ShardPart, tessera_state::StoreError>>>, NodeError>
    {
        let scope = self.scope(key);
        let Some(partition) = self.partition_of(key) else {
            return Ok(ShardStates::export(&*self.state, &scope)?);
        };
        let replica = self
            .partitions
            .as_ref()
            .and_then(|partitions| partitions.replica_store(partition))
            .ok_or_else(|| no_replica(key, partition))?;
        let replicated = tessera_state::export_shard(&replica, &scope)?;
        let remembered = ShardStates::export(&*self.state, &scope)?;
        Ok(Box::new(chain_parts(replicated, remembered)))
    }

    /// The catalog (after a barrier, so it holds every change acknowledged before) and the
    /// owner of every allocated shard, at one commit; a tenant sees only its own types and
    /// shards and no tenant records.
    pub async fn backup_plan(&self, principal: &Principal) -> Result<BackupPlan, NodeError> {
        self.sync_catalog().await?;
        let tenant = tenant_of(principal);
        let store = self.plane.store();
        let cut = store.cut(tenant)?;
        let members = store.members()?;
        let mut nodes: Vec<PlannedNode> = members
            .into_iter()
            .filter(|member| matches!(member.state, MemberState::Up | MemberState::Leaving))
            .map(|member| PlannedNode {
                node: member.node,
                api_address: member.api_address,
            })
            .collect();
        if !nodes
            .iter()
            .any(|member| member.node == self.config.node_id)
        {
            nodes.push(PlannedNode {
                node: self.config.node_id.clone(),
                api_address: String::new(),
            });
        }
        // A deleted type keeps its allocations (and rows) but is not backed up.
        let shards = cut
            .shards
            .into_iter()
            .filter(|(key, _)| {
                let (tenant, name) = (&key.type_key.tenant, &key.type_key.entity_type);
                let kept = |record: &TypeRecord| record.tenant == *tenant && record.name == *name;
                cut.types.iter().any(kept)
            })
            .map(|(key, allocation)| PlannedShard {
                tenant: key.type_key.tenant,
                entity_type: key.type_key.entity_type,
                shard: key.shard,
                node: allocation.node,
                generation: allocation.generation,
            })
            .collect();
        Ok(BackupPlan {
            node: self.config.node_id.clone(),
            commit: cut.commit,
            num_shards: self.config.sharding.num_shards,
            tenant: tenant.map(str::to_string),
            tenants: if tenant.is_some() {
                Vec::new()
            } else {
                cut.tenants
            },
            types: cut.types,
            shards,
            nodes,
        })
    }

    /// The bytes of plugin `sha256`, if this node holds them and (for a tenant) one of the
    /// tenant's versions uses it.
    pub fn backup_plugin(&self, principal: &Principal, sha256: &str) -> Result<Vec<u8>, NodeError> {
        let types = self.plane.store().entity_types(tenant_of(principal))?;
        let used = types
            .iter()
            .flat_map(|record| &record.versions)
            .any(|version| version.sha256 == sha256);
        if !used {
            return Err(NodeError::NotFound(format!(
                "no version uses plugin {sha256}"
            )));
        }
        self.catalog.sources.blobs.get(sha256)?.ok_or_else(|| {
            NodeError::NotFound(format!(
                "node {} does not hold plugin {sha256}; back up through a voter",
                self.config.node_id
            ))
        })
    }

    /// Streams every shard this node owns and serves (a tenant's only), each from its own
    /// snapshot, as [`Record::Shard`] frames and then a [`Record::End`] frame; an error ends
    /// the stream without its end frame. Reads on a blocking thread, at most
    /// [`BACKUP_FRAMES_QUEUED_MAX`] frames ahead of the reader.
    pub fn backup_shards(self: &Arc<Self>, principal: &Principal) -> mpsc::Receiver<BackupFrame> {
        let (frames, receiver) = mpsc::channel(BACKUP_FRAMES_QUEUED_MAX);
        let node = self.clone();
        let tenant = tenant_of(principal).map(str::to_string);
        tokio::task::spawn_blocking(move || {
            if let Err(error) = node.stream_shards(tenant.as_deref(), &frames) {
                let _ = frames.blocking_send(Err(error));
            }
        });
        receiver
    }

    fn stream_shards(
        &self,
        tenant: Option<&str>,
        frames: &mpsc::Sender<BackupFrame>,
    ) -> Result<(), NodeError> {
        let cut = self.plane.store().cut(tenant)?;
        let mut summary = Summary::default();
        for (key, allocation) in cut.shards {
            if allocation.node != self.config.node_id || !self.region.owns(&key) {
                continue;
            }
            for part in self.shard_parts(&key)? {
                let record = ShardRecord {
                    tenant: key.type_key.tenant.clone(),
                    entity_type: key.type_key.entity_type.clone(),
                    shard: key.shard,
                    node: self.config.node_id.clone(),
                    generation: allocation.generation,
                    part: part?,
                };
                summary.entities += record.entities();
                summary.records += 1;
                if frames
                    .blocking_send(Ok(frame(&Record::Shard(record))?))
                    .is_err()
                {
                    return Ok(()); // the client went away
                }
            }
            summary.shards += 1;
        }
        let _ = frames.blocking_send(Ok(frame(&Record::End(summary))?));
        Ok(())
    }

    /// Creates `tenant` as the backup holds it (its token hash, quotas and creation time), so
    /// its token works here as it did there.
    pub async fn restore_tenant(&self, tenant: Tenant) -> Result<Tenant, NodeError> {
        let applied = self
            .plane
            .submit(Command::CreateTenant {
                name: tenant.name,
                token_sha256: tenant.token_sha256,
                quotas: tenant.quotas,
                created_ms: tenant.created_ms,
            })
            .await?;
        match applied {
            tessera_metadata::Applied::Tenant(tenant) => Ok(tenant),
            other => Err(NodeError::BadRequest(format!(
                "restoring a tenant applied as {other:?}"
            ))),
        }
    }

    /// Deploys one version of a backup under `tenant`: its plugin must hash to the version's
    /// hash, and the type must have exactly the versions before it (versions are restored in
    /// order, so a restored type keeps its version numbers).
    pub async fn restore_version(
        &self,
        tenant: &str,
        entity_type: &str,
        version: VersionRecord,
        plugin: Vec<u8>,
    ) -> Result<VersionRecord, NodeError> {
        let hashed = blob_name(&plugin);
        if hashed != version.sha256 {
            return Err(NodeError::BadRequest(format!(
                "the plugin of {entity_type} v{} hashes to {hashed}, not {}",
                version.version, version.sha256
            )));
        }
        let held = self
            .plane
            .store()
            .entity_type(tenant, entity_type)?
            .map_or(0, |record| record.versions.len());
        if held as u64 + 1 != u64::from(version.version) {
            return Err(NodeError::Conflict(format!(
                "entity type {entity_type} of tenant {tenant} has {held} versions here; \
                 version {} of the backup cannot follow them (restore into a tenant without \
                 this type)",
                version.version
            )));
        }
        self.deploy(tenant, entity_type, plugin, version.options)
            .await
    }

    /// Installs one part of a shard under `tenant`, on this node if it owns the shard —
    /// allocating the shard first if nobody does, as a first message would — or answers which
    /// node does.
    pub async fn restore_shard(
        &self,
        tenant: &str,
        record: ShardRecord,
    ) -> Result<ShardRestored, NodeError> {
        if record.shard >= self.config.sharding.num_shards {
            return Err(NodeError::BadRequest(format!(
                "shard {} of the backup is past this cluster's {} shards per type",
                record.shard, self.config.sharding.num_shards
            )));
        }
        self.entity_type(tenant, &record.entity_type)?;
        let key = ShardKey::new(TypeKey::new(tenant, &record.entity_type), record.shard);
        let scope = self.scope(&key);
        record
            .part
            .check(&scope)
            .map_err(|error| NodeError::BadRequest(error.to_string()))?;
        let ids = record.part.entities.iter().map(|entity| &entity.id);
        let Some(probe) = ids.chain(&record.part.remembered).next() else {
            // An empty shard: nothing to install anywhere.
            return Ok(ShardRestored {
                installed: false,
                owner: self.config.node_id.clone(),
                api_address: None,
            });
        };
        let probe = EntityAddress::new(tenant, &record.entity_type, probe.as_str());
        let allocation = self.served_allocation(&key, probe).await?;
        if allocation.node != self.config.node_id {
            let api_address = self
                .plane
                .store()
                .members()?
                .into_iter()
                .find(|member| member.node == allocation.node)
                .map(|member| member.api_address);
            return Ok(ShardRestored {
                installed: false,
                owner: allocation.node,
                api_address,
            });
        }
        let mut part = record.part;
        leap_sequences(&mut part);
        match self.partition_of(&key) {
            None => ShardStates::install(&*self.state, scope, allocation.generation, part)
                .await
                .map_err(tessera_state::StoreError::from)?,
            Some(partition) => self.restore_into_partition(&key, partition, part).await?,
        }
        Ok(ShardRestored {
            installed: true,
            owner: allocation.node,
            api_address: None,
        })
    }

    /// Writes a restored part of partitioned shard `key` through this node's replica of its
    /// partition (a group op, so every replica holds it), its entities restamped.
    async fn restore_into_partition(
        &self,
        key: &ShardKey,
        partition: u32,
        part: ShardPart,
    ) -> Result<(), NodeError> {
        let replica = self
            .partitions
            .as_ref()
            .and_then(|partitions| partitions.replica_state(partition))
            .ok_or_else(|| no_replica(key, partition))?;
        // A stamp no write of the partition has: 63 random bits, never 0.
        let stamp = rand::random::<u64>() | 1;
        replica
            .install(stamp, key.type_key.clone(), key.shard, part)
            .await
            .map_err(tessera_state::StoreError::from)?;
        Ok(())
    }

    /// The shard's allocation once it has one and, if it is this node's, once this node
    /// serves it (its lineage begun, so nothing installed is cleared after). A state read of
    /// `probe` allocates a shard nobody owns; it never starts the entity.
    async fn served_allocation(
        &self,
        key: &ShardKey,
        probe: EntityAddress,
    ) -> Result<tessera_contract::Allocation, NodeError> {
        let deadline = tokio::time::Instant::now() + RESTORE_ALLOCATION_WAIT;
        loop {
            let allocation = self.plane.store().shard_allocation(key)?;
            if let Some(allocation) = allocation
                && (allocation.node != self.config.node_id || self.region.owns(key))
            {
                return Ok(allocation);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(NodeError::Message(
                    tessera_contract::MessageError::shard_unavailable(format!(
                        "shard {key} was not allocated and served within {} ms",
                        RESTORE_ALLOCATION_WAIT.as_millis()
                    )),
                ));
            }
            // Fails while the type is not bound here yet (its plugin compiling): looked at
            // again after a pause.
            if let Err(error) = self.region.read_state(probe.clone(), None).await {
                tracing::debug!(%key, %error, "the probe of a restored shard failed");
            }
            tokio::time::sleep(RESTORE_ALLOCATION_POLL).await;
        }
    }

    /// The shard as the state layer names it: the shard function over ids.
    fn scope(&self, key: &ShardKey) -> ShardScope {
        let extractor = FnvExtractor::new(self.config.sharding.num_shards);
        let shard = key.shard;
        ShardScope {
            type_key: key.type_key.clone(),
            shard,
            contains: Arc::new(move |id: &str| extractor.shard_of(id) == shard),
        }
    }
}

/// The refusal of a partitioned shard this node serves but holds no replica of.
fn no_replica(key: &ShardKey, partition: u32) -> NodeError {
    NodeError::Message(tessera_contract::MessageError::shard_unavailable(format!(
        "shard {key} is served here but this node holds no replica of its partition {partition}"
    )))
}

/// Moves each entity's next outbox sequence number [`RESTORE_SEQUENCE_LEAP`] on, past any
/// receipt another shard's snapshot may hold for it; tells still in its outbox keep theirs and
/// go first, in order.
fn leap_sequences(part: &mut ShardPart) {
    for entity in &mut part.entities {
        if let Some((next_seq, ..)) = &mut entity.sequences {
            *next_seq = next_seq.saturating_add(RESTORE_SEQUENCE_LEAP);
        }
    }
}

/// The tenant a principal is limited to (`None`: the admin, every tenant).
/// `first`'s parts, then `second`'s, numbered as one sequence whose last part is `second`'s
/// last (each source's own numbering starts at 0, and an install clears the shard at part 0).
fn chain_parts(
    first: impl Iterator<Item = Result<ShardPart, tessera_state::StoreError>>,
    second: impl Iterator<Item = Result<ShardPart, tessera_state::StoreError>>,
) -> impl Iterator<Item = Result<ShardPart, tessera_state::StoreError>> {
    let first = first.map(|part| {
        part.map(|mut part| {
            part.last = false;
            part
        })
    });
    first.chain(second).enumerate().map(|(index, part)| {
        part.map(|mut part| {
            part.index = u32::try_from(index).unwrap_or(u32::MAX);
            part
        })
    })
}

fn tenant_of(principal: &Principal) -> Option<&str> {
    match principal {
        Principal::Admin => None,
        Principal::Tenant(name) => Some(name.as_str()),
    }
}

fn frame(record: &Record) -> Result<Vec<u8>, NodeError> {
    encode_frame(record).map_err(|error| NodeError::BadRequest(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_state::shard_transfer::EntityRecord;

    #[test]
    fn a_restored_sender_numbers_its_next_tells_past_any_receipt_of_the_backup() {
        let sender = |id: &str, sequences| EntityRecord {
            id: id.into(),
            sequences,
            ..EntityRecord::default()
        };
        let mut part = ShardPart {
            index: 0,
            last: true,
            entities: vec![sender("a", Some((7, 3, 1, 2))), sender("b", None)],
            remembered: Vec::new(),
        };
        leap_sequences(&mut part);
        assert_eq!(
            part.entities[0].sequences,
            Some((7 + RESTORE_SEQUENCE_LEAP, 3, 1, 2)),
            "only the next outbox sequence moves"
        );
        assert_eq!(part.entities[1].sequences, None);
    }
}
