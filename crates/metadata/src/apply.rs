//! The catalog's state machine: applies one [`Command`] inside one redb write transaction, or
//! refuses it and changes nothing. Deterministic — the same commands in the same order give the
//! same tables on every replica.

use super::command::{Applied, Command};
use super::error::{MetadataError, storage};
use super::limits::VERSIONS_PER_TYPE_MAX;
use super::member_state::MemberState;
use super::members::{MemberRecord, join_member, renew_lease, set_member_state};
use super::records::validate_name;
use super::records::{Quotas, Tenant, TypeRecord, VersionRecord};
use super::shards::{
    assign_shards, complete_handoff, move_shards, regenerate_held_by, seat_coordinator,
};
use super::store::{
    APPLIED_COMMANDS, COUNTERS, MetadataStore, PLUGIN_REFS, TENANTS, TOKENS, TYPES, decode, encode,
};
use redb::{ReadableTable, WriteTransaction};

impl MetadataStore {
    /// Applies one command durably, or refuses it and changes nothing.
    pub fn apply(&self, command: Command) -> Result<Applied, MetadataError> {
        let transaction = self.database.begin_write().map_err(storage)?;
        let applied = apply_in(&transaction, command)?;
        count_applied(&transaction)?;
        transaction.commit().map_err(storage)?;
        Ok(applied)
    }
}

fn apply_in(transaction: &WriteTransaction, command: Command) -> Result<Applied, MetadataError> {
    match command {
        Command::CreateTenant {
            name,
            token_sha256,
            quotas,
            created_ms,
        } => create_tenant(transaction, name, token_sha256, quotas, created_ms),
        Command::UpdateQuotas { name, quotas } => update_quotas(transaction, name, quotas),
        Command::DeployVersion {
            tenant,
            entity_type,
            sha256,
            size_bytes,
            options,
            deployed_ms,
        } => {
            let version = VersionRecord {
                version: 0,
                sha256,
                size_bytes,
                options,
                deployed_ms,
            };
            deploy_version(transaction, tenant, entity_type, version)
        }
        Command::SetActiveVersion {
            tenant,
            entity_type,
            version,
        } => set_active_version(transaction, tenant, entity_type, version),
        Command::DeleteType {
            tenant,
            entity_type,
        } => delete_type(transaction, tenant, entity_type),
        Command::SeatCoordinator { epoch } => seat_coordinator(transaction, epoch),
        Command::AssignShards { epoch, assignments } => {
            assign_shards(transaction, epoch, assignments)
        }
        Command::MoveShards { epoch, moves } => move_shards(transaction, epoch, moves),
        Command::PlacePartitions { epoch, placements } => {
            super::partitions::place_partitions(transaction, epoch, placements)
        }
        Command::CompleteHandoff { key, generation } => {
            complete_handoff(transaction, &key, generation)
        }
        Command::Barrier => Ok(Applied::Barrier),
        Command::RenewLease { node } => {
            renew_lease(transaction, &node).map(|_| Applied::LeaseRenewed)
        }
        Command::JoinMember {
            node,
            cluster_address,
            api_address,
            roles,
            joined_ms,
        } => {
            let record = MemberRecord {
                node,
                cluster_address,
                api_address,
                roles,
                state: MemberState::Joining,
                joined_ms,
                updated_ms: joined_ms,
            };
            join_member(transaction, record).map(Applied::Member)
        }
        Command::SetMemberState {
            node,
            state,
            updated_ms,
        } => {
            let record = set_member_state(transaction, &node, state, updated_ms)?;
            if state == MemberState::Removed {
                regenerate_held_by(transaction, &node)?;
            }
            Ok(Applied::Member(record))
        }
    }
}

/// Counts one more applied command, in the command's own transaction.
fn count_applied(transaction: &WriteTransaction) -> Result<(), MetadataError> {
    let mut counters = transaction.open_table(COUNTERS).map_err(storage)?;
    let applied = counters
        .get(APPLIED_COMMANDS)
        .map_err(storage)?
        .map_or(0, |count| count.value());
    counters
        .insert(APPLIED_COMMANDS, applied + 1)
        .map_err(storage)?;
    Ok(())
}

fn create_tenant(
    transaction: &WriteTransaction,
    name: String,
    token_sha256: String,
    quotas: Quotas,
    created_ms: u64,
) -> Result<Applied, MetadataError> {
    validate_name(&name)?;
    quotas.validate().map_err(MetadataError::InvalidQuotas)?;
    let mut tenants = transaction.open_table(TENANTS).map_err(storage)?;
    if tenants.get(name.as_str()).map_err(storage)?.is_some() {
        return Err(MetadataError::TenantExists(name));
    }
    let tenant = Tenant {
        name,
        token_sha256,
        quotas,
        created_ms,
    };
    tenants
        .insert(tenant.name.as_str(), encode(&tenant).as_slice())
        .map_err(storage)?;
    let mut tokens = transaction.open_table(TOKENS).map_err(storage)?;
    tokens
        .insert(tenant.token_sha256.as_str(), tenant.name.as_str())
        .map_err(storage)?;
    Ok(Applied::Tenant(tenant))
}

fn update_quotas(
    transaction: &WriteTransaction,
    name: String,
    quotas: Quotas,
) -> Result<Applied, MetadataError> {
    quotas.validate().map_err(MetadataError::InvalidQuotas)?;
    let mut tenants = transaction.open_table(TENANTS).map_err(storage)?;
    let mut tenant: Tenant = match tenants.get(name.as_str()).map_err(storage)? {
        Some(bytes) => decode(bytes.value())?,
        None => return Err(MetadataError::NoTenant(name)),
    };
    tenant.quotas = quotas;
    tenants
        .insert(tenant.name.as_str(), encode(&tenant).as_slice())
        .map_err(storage)?;
    Ok(Applied::Tenant(tenant))
}

fn deploy_version(
    transaction: &WriteTransaction,
    tenant: String,
    entity_type: String,
    mut version: VersionRecord,
) -> Result<Applied, MetadataError> {
    validate_name(&entity_type)?;
    let quotas = read_tenant(transaction, &tenant)?.quotas;
    let existing = read_type(transaction, &tenant, &entity_type)?;
    super::replication::settle(
        transaction,
        (&tenant, &entity_type),
        version.options.replication_factor,
        quotas.replication_factor,
        existing.is_some(),
    )?;
    let mut record = existing.unwrap_or(TypeRecord {
        tenant: tenant.clone(),
        name: entity_type.clone(),
        active_version: 0,
        versions: Vec::new(),
    });
    if record.versions.len() >= VERSIONS_PER_TYPE_MAX {
        return Err(MetadataError::TooManyVersions(entity_type));
    }
    check_plugin_quotas(transaction, &tenant, &quotas, version.size_bytes)?;
    add_plugin_ref(transaction, &version.sha256, 1)?;
    version.version = record.versions.last().map_or(1, |last| last.version + 1);
    record.active_version = version.version;
    record.versions.push(version);
    write_type(transaction, &record)?;
    Ok(Applied::Type(record))
}

/// Refuses a plugin of `size_bytes` over the tenant's `plugin_bytes_max`, or one that takes
/// the sizes of all its versions past `plugin_bytes_total_max`. Checked again here, in the
/// ordered command, so no node's check can be raced past.
fn check_plugin_quotas(
    transaction: &WriteTransaction,
    tenant: &str,
    quotas: &Quotas,
    size_bytes: u64,
) -> Result<(), MetadataError> {
    if size_bytes > quotas.plugin_bytes_max as u64 {
        return Err(MetadataError::QuotaExceeded(format!(
            "the plugin is {size_bytes} bytes, over the tenant's plugin_bytes_max of {}",
            quotas.plugin_bytes_max
        )));
    }
    let kept = tenant_plugin_bytes(transaction, tenant)?;
    if kept.saturating_add(size_bytes) > quotas.plugin_bytes_total_max as u64 {
        return Err(MetadataError::QuotaExceeded(format!(
            "tenant {tenant} keeps {kept} plugin bytes; {size_bytes} more would pass its \
             plugin_bytes_total_max of {} (delete a type to free its versions)",
            quotas.plugin_bytes_total_max
        )));
    }
    Ok(())
}

/// The sizes of every version of every type of `tenant`, summed.
fn tenant_plugin_bytes(transaction: &WriteTransaction, tenant: &str) -> Result<u64, MetadataError> {
    let types = transaction.open_table(TYPES).map_err(storage)?;
    let mut total = 0u64;
    for row in types.range((tenant, "")..).map_err(storage)? {
        let (key, bytes) = row.map_err(storage)?;
        if key.value().0 != tenant {
            break;
        }
        let record: TypeRecord = decode(bytes.value())?;
        total = record
            .versions
            .iter()
            .fold(total, |sum, version| sum.saturating_add(version.size_bytes));
    }
    Ok(total)
}

/// Adds `delta` to the number of versions using `sha256`; at zero it is no longer used.
fn add_plugin_ref(
    transaction: &WriteTransaction,
    sha256: &str,
    delta: i64,
) -> Result<(), MetadataError> {
    let mut refs = transaction.open_table(PLUGIN_REFS).map_err(storage)?;
    let current = refs.get(sha256).map_err(storage)?.map_or(0, |r| r.value());
    let next = (i64::from(current) + delta).max(0) as u32;
    if next == 0 {
        // The bytes stay in each node's blob store until its collector sees this.
        refs.remove(sha256).map_err(storage)?;
    } else {
        refs.insert(sha256, next).map_err(storage)?;
    }
    Ok(())
}

fn set_active_version(
    transaction: &WriteTransaction,
    tenant: String,
    entity_type: String,
    version: u32,
) -> Result<Applied, MetadataError> {
    let Some(mut record) = read_type(transaction, &tenant, &entity_type)? else {
        return Err(MetadataError::NoType(tenant, entity_type));
    };
    if record.version(version).is_none() {
        return Err(MetadataError::NoVersion(entity_type, version));
    }
    record.active_version = version;
    write_type(transaction, &record)?;
    Ok(Applied::Type(record))
}

fn delete_type(
    transaction: &WriteTransaction,
    tenant: String,
    entity_type: String,
) -> Result<Applied, MetadataError> {
    let Some(record) = read_type(transaction, &tenant, &entity_type)? else {
        return Err(MetadataError::NoType(tenant, entity_type));
    };
    for version in &record.versions {
        add_plugin_ref(transaction, &version.sha256, -1)?;
    }
    let mut types = transaction.open_table(TYPES).map_err(storage)?;
    types
        .remove((tenant.as_str(), entity_type.as_str()))
        .map_err(storage)?;
    Ok(Applied::TypeDeleted {
        tenant,
        entity_type,
    })
}

fn read_tenant(transaction: &WriteTransaction, tenant: &str) -> Result<Tenant, MetadataError> {
    let tenants = transaction.open_table(TENANTS).map_err(storage)?;
    let record = tenants.get(tenant).map_err(storage)?;
    match record {
        Some(bytes) => decode(bytes.value()),
        None => Err(MetadataError::NoTenant(tenant.to_string())),
    }
}

fn read_type(
    transaction: &WriteTransaction,
    tenant: &str,
    entity_type: &str,
) -> Result<Option<TypeRecord>, MetadataError> {
    let types = transaction.open_table(TYPES).map_err(storage)?;
    let record = types.get((tenant, entity_type)).map_err(storage)?;
    record.map(|bytes| decode(bytes.value())).transpose()
}

fn write_type(transaction: &WriteTransaction, record: &TypeRecord) -> Result<(), MetadataError> {
    let mut types = transaction.open_table(TYPES).map_err(storage)?;
    types
        .insert(
            (record.tenant.as_str(), record.name.as_str()),
            encode(record).as_slice(),
        )
        .map_err(storage)?;
    Ok(())
}

#[cfg(test)]
mod tests;
