//! `tessera backup` and `tessera restore` (`docs/backup.md`). A backup asks one node for the
//! plan (the catalog at one commit and each shard's owner), writes the catalog and every
//! version's plugin, then streams each member's shards into the file as they come, checking
//! every frame; it ends with a check that each shard of the plan came once, from the owner
//! the plan named, and is renamed into place only when whole. A restore reads the whole file
//! once to check it (and that the cluster is empty) before it changes anything, then sends its
//! records in order, each shard part to the shard's owner in the restoring cluster. With
//! `--tenant` both work with the tenant token, on that tenant's part only.

use super::client::{Client, ClientArgs, ClientError, Role};
use crate::backup::{
    BackupError, BackupPlan, FrameReader, Header, RECORD_BYTES_MAX, Reader, Record, ShardRestored,
    Summary, Writer,
};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, BufWriter, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The media type of a backup record sent to a restore endpoint.
const RECORD_MEDIA_TYPE: &str = "application/msgpack";

/// Hops a shard part follows to its owner (a node that does not own it names the owner). With
/// the partition plane a shard follows its partition's primary, which may change more than
/// once while a large restore loads the groups: each hop after the first waits a little longer
/// ([`SHARD_HOP_PAUSE`] times the hops so far) for the move to settle.
const SHARD_HOPS_MAX: usize = 8;

/// The pause before a shard part's second hop; later hops wait as many times this as hops came
/// before.
const SHARD_HOP_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Tries of one shard part refused as unavailable (its shard still being allocated) before
/// the restore gives up.
const SHARD_ATTEMPTS_MAX: usize = 5;

/// Bytes of a frame before its record's body.
const FRAME_HEAD_BYTES: usize = 8;

/// Where the backup is written and whose it is.
#[derive(Debug, clap::Args)]
pub(crate) struct BackupArgs {
    /// The file to write (written as FILE.partial, renamed once whole).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Export only the tenant of the tenant token (default: the whole cluster, admin token).
    #[arg(long)]
    tenant: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// Which backup to restore, and whose.
#[derive(Debug, clap::Args)]
pub(crate) struct RestoreArgs {
    /// The backup file.
    file: PathBuf,
    /// Import a tenant export into the tenant of the tenant token (default: restore a whole
    /// cluster backup into an empty cluster, admin token).
    #[arg(long)]
    tenant: bool,
    #[command(flatten)]
    client: ClientArgs,
}

fn role(tenant: bool) -> Role {
    if tenant { Role::Tenant } else { Role::Admin }
}

/// `tessera backup --out FILE`.
pub(crate) fn backup(args: BackupArgs) -> ExitCode {
    match run_backup(&args) {
        Ok(summary) => {
            println!(
                "backed up {} shards, {} entities to {}",
                summary.shards,
                summary.entities,
                args.out.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => error.report(),
    }
}

/// `tessera restore FILE`.
pub(crate) fn restore(args: RestoreArgs) -> ExitCode {
    match run_restore(&args) {
        Ok(summary) => {
            println!(
                "restored {} shards, {} entities from {}",
                summary.shards,
                summary.entities,
                args.file.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => error.report(),
    }
}

fn run_backup(args: &BackupArgs) -> Result<Summary, ClientError> {
    let client = Client::new(&args.client, role(args.tenant))?;
    let plan: BackupPlan = serde_json::from_value(client.get("/v1/backup")?)
        .map_err(|error| ClientError::Usage(format!("the node's backup plan: {error}")))?;
    let partial = PathBuf::from(format!("{}.partial", args.out.display()));
    let file = File::create(&partial).map_err(|error| file_error(&partial, error))?;
    let header = Header {
        created_ms: now_ms(),
        node: plan.node.clone(),
        catalog_commit: plan.commit,
        num_shards: plan.num_shards,
        tenant: plan.tenant.clone(),
    };
    let mut writer = Writer::new(BufWriter::new(file), &header).map_err(backup_error)?;
    write_catalog(&client, &plan, &mut writer)?;
    let mut progress = Progress::new("backed up", plan.shards.len());
    let mut exported: HashMap<(String, String, u32), (String, u64)> = HashMap::new();
    for member in &plan.nodes {
        let url = match member.node == plan.node {
            true => client.url().to_string(),
            false => format!("http://{}", member.api_address),
        };
        let stream = client.at(&url).get_reader("/v1/backup/shards")?;
        let mut frames = FrameReader::new(stream);
        loop {
            let next = frames.next_frame().map_err(|error| {
                ClientError::Usage(format!("the shards of node {}: {error}", member.node))
            })?;
            match next {
                Some((Record::Shard(shard), frame)) => {
                    if shard.part.index == 0 {
                        let key = (shard.tenant.clone(), shard.entity_type.clone(), shard.shard);
                        let from = (shard.node.clone(), shard.generation);
                        if let Some(earlier) = exported.insert(key, from) {
                            return Err(moved(&shard.entity_type, shard.shard, &earlier.0));
                        }
                        progress.shards += 1;
                    }
                    progress.entities += shard.entities();
                    writer.write_frame(&frame).map_err(backup_error)?;
                    progress.bytes = writer.bytes();
                    progress.draw();
                }
                Some((Record::End(_), _)) => break,
                Some(_) => {
                    return Err(ClientError::Usage(format!(
                        "node {} sent a record that is not a shard",
                        member.node
                    )));
                }
                None => {
                    return Err(ClientError::Usage(format!(
                        "the shards of node {} ended before their end record",
                        member.node
                    )));
                }
            }
        }
    }
    for planned in &plan.shards {
        let key = (
            planned.tenant.clone(),
            planned.entity_type.clone(),
            planned.shard,
        );
        match exported.get(&key) {
            Some((node, generation))
                if *node == planned.node && *generation == planned.generation => {}
            _ => return Err(moved(&planned.entity_type, planned.shard, &planned.node)),
        }
    }
    let summary = Summary {
        records: 0,
        shards: progress.shards,
        entities: progress.entities,
    };
    progress.finish();
    let file = writer.finish(summary.clone()).map_err(backup_error)?;
    let file = file
        .into_inner()
        .map_err(|error| file_error(&partial, error.into_error()))?;
    file.sync_all()
        .map_err(|error| file_error(&partial, error))?;
    std::fs::rename(&partial, &args.out).map_err(|error| file_error(&args.out, error))?;
    Ok(summary)
}

/// Tenants, then each type's versions with their plugins, then its active version.
fn write_catalog(
    client: &Client,
    plan: &BackupPlan,
    writer: &mut Writer<BufWriter<File>>,
) -> Result<(), ClientError> {
    for tenant in &plan.tenants {
        writer
            .write(&Record::Tenant(tenant.clone()))
            .map_err(backup_error)?;
    }
    for record in &plan.types {
        for version in &record.versions {
            let mut plugin = Vec::new();
            client
                .get_reader(&format!("/v1/backup/plugins/{}", version.sha256))?
                .take(RECORD_BYTES_MAX as u64 + 1)
                .read_to_end(&mut plugin)
                .map_err(|error| ClientError::Usage(format!("reading a plugin: {error}")))?;
            if plugin.len() > RECORD_BYTES_MAX {
                return Err(ClientError::Usage(format!(
                    "plugin {} is over {RECORD_BYTES_MAX} bytes, more than a backup record holds",
                    version.sha256
                )));
            }
            writer
                .write(&Record::Version {
                    tenant: record.tenant.clone(),
                    entity_type: record.name.clone(),
                    version: version.clone(),
                    plugin,
                })
                .map_err(backup_error)?;
        }
        writer
            .write(&Record::Active {
                tenant: record.tenant.clone(),
                entity_type: record.name.clone(),
                version: record.active_version,
            })
            .map_err(backup_error)?;
    }
    Ok(())
}

fn moved(entity_type: &str, shard: u32, node: &str) -> ClientError {
    ClientError::Usage(format!(
        "shard {shard} of {entity_type} (owned by {node} when the backup began) moved during \
         the backup or was not served by its owner, so no single snapshot of it was taken; run \
         the backup again"
    ))
}

fn run_restore(args: &RestoreArgs) -> Result<Summary, ClientError> {
    let client = Client::new(&args.client, role(args.tenant))?;
    let (header, types) = check_file(&args.file)?;
    match (&header.tenant, args.tenant) {
        (Some(tenant), false) => {
            return Err(ClientError::Usage(format!(
                "{} is an export of tenant {tenant}: import it with that tenant's token and --tenant",
                args.file.display()
            )));
        }
        (None, true) => {
            return Err(ClientError::Usage(format!(
                "{} is a backup of a whole cluster: restore it with the admin token, without --tenant",
                args.file.display()
            )));
        }
        _ => {}
    }
    let plan: BackupPlan = serde_json::from_value(client.get("/v1/backup")?)
        .map_err(|error| ClientError::Usage(format!("the node's backup plan: {error}")))?;
    check_target(&header, &types, &plan)?;
    let file = File::open(&args.file).map_err(|error| file_error(&args.file, error))?;
    let mut reader = Reader::open(BufReader::new(file)).map_err(backup_error)?;
    let mut progress = Progress::new("restored", 0);
    let mut owners: HashMap<(String, u32), Client> = HashMap::new();
    while let Some((record, frame)) = reader.next_frame().map_err(backup_error)? {
        let body = &frame[FRAME_HEAD_BYTES..];
        match &record {
            Record::Tenant(tenant) => {
                let tenant = serde_json::to_value(tenant)
                    .map_err(|error| ClientError::Usage(error.to_string()))?;
                client.json(ureq::http::Method::POST, "/v1/restore/tenants", &tenant)?;
            }
            Record::Version { .. } => post(&client, "/v1/restore/versions", body).map(drop)?,
            Record::Active { .. } => post(&client, "/v1/restore/active", body).map(drop)?,
            Record::Shard(shard) => {
                let key = (shard.entity_type.clone(), shard.shard);
                let target = owners
                    .remove(&key)
                    .unwrap_or_else(|| client.at(client.url()));
                let owner = restore_part(target, body)?;
                owners.insert(key, owner);
                if shard.part.index == 0 {
                    progress.shards += 1;
                }
                progress.entities += shard.entities();
            }
            _ => {}
        }
        progress.bytes += frame.len() as u64;
        progress.draw();
    }
    progress.finish();
    Ok(Summary {
        records: 0,
        shards: progress.shards,
        entities: progress.entities,
    })
}

/// Reads the whole file once: every frame's checksum, the version, the end record. Answers the
/// header and the types the file restores, before anything is sent.
fn check_file(path: &Path) -> Result<(Header, HashSet<String>), ClientError> {
    let file = File::open(path).map_err(|error| file_error(path, error))?;
    let mut reader = Reader::open(BufReader::new(file)).map_err(backup_error)?;
    let mut types = HashSet::new();
    while let Some(record) = reader.next_record().map_err(backup_error)? {
        if let Record::Version { entity_type, .. } = record {
            types.insert(entity_type);
        }
    }
    Ok((reader.header().clone(), types))
}

/// Refuses a cluster that is not empty (a cluster restore) or a tenant that has one of the
/// file's types already (an import), and a different number of shards per type.
fn check_target(
    header: &Header,
    types: &HashSet<String>,
    plan: &BackupPlan,
) -> Result<(), ClientError> {
    if header.num_shards != plan.num_shards {
        return Err(ClientError::Usage(format!(
            "the backup has {} shards per type and this cluster {}: restore into a cluster \
             configured with num_shards = {}",
            header.num_shards, plan.num_shards, header.num_shards
        )));
    }
    if header.tenant.is_none() && !plan.tenants.is_empty() {
        let names: Vec<&str> = plan
            .tenants
            .iter()
            .map(|tenant| tenant.name.as_str())
            .collect();
        return Err(ClientError::Usage(format!(
            "the cluster is not empty (it has tenants {}): a backup is restored into an empty \
             cluster only; nothing was changed",
            names.join(", ")
        )));
    }
    let held: Vec<&str> = plan
        .types
        .iter()
        .map(|record| record.name.as_str())
        .filter(|name| types.contains(*name))
        .collect();
    if !held.is_empty() {
        return Err(ClientError::Usage(format!(
            "the tenant has types {} already: an export is imported into a tenant without its \
             types; nothing was changed",
            held.join(", ")
        )));
    }
    Ok(())
}

/// Sends a shard part to `target`, following the owner it names; the client of the node that
/// installed it.
fn restore_part(mut target: Client, body: &[u8]) -> Result<Client, ClientError> {
    for hop in 0..SHARD_HOPS_MAX {
        if hop > 1 {
            std::thread::sleep(SHARD_HOP_PAUSE * (hop as u32 - 1));
        }
        let answer = post_retrying(&target, body)?;
        let restored: ShardRestored = serde_json::from_value(answer)
            .map_err(|error| ClientError::Usage(format!("a restore answer: {error}")))?;
        match restored.api_address {
            Some(address) if !restored.installed => {
                target = target.at(&format!("http://{address}"));
            }
            _ => return Ok(target),
        }
    }
    Err(ClientError::Usage(format!(
        "a shard part was sent on {SHARD_HOPS_MAX} times without reaching its owner"
    )))
}

fn post_retrying(target: &Client, body: &[u8]) -> Result<serde_json::Value, ClientError> {
    let mut attempt = 1;
    loop {
        match post(target, "/v1/restore/shards", body) {
            Err(ClientError::Refused(503, _)) if attempt < SHARD_ATTEMPTS_MAX => attempt += 1,
            answer => return answer,
        }
    }
}

fn post(client: &Client, path: &str, body: &[u8]) -> Result<serde_json::Value, ClientError> {
    let mut reader = body;
    client.upload(path, RECORD_MEDIA_TYPE, &mut reader, body.len() as u64)
}

fn backup_error(error: BackupError) -> ClientError {
    ClientError::Usage(error.to_string())
}

fn file_error(path: &Path, error: std::io::Error) -> ClientError {
    ClientError::Usage(format!("{}: {error}", path.display()))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// Shards, entities and bytes done, redrawn on one line of a terminal's stderr (printed once
/// at the end elsewhere).
struct Progress {
    verb: &'static str,
    planned: usize,
    shards: u64,
    entities: u64,
    bytes: u64,
    terminal: bool,
}

impl Progress {
    fn new(verb: &'static str, planned: usize) -> Self {
        Progress {
            verb,
            planned,
            shards: 0,
            entities: 0,
            bytes: 0,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn line(&self) -> String {
        let planned = match self.planned {
            0 => String::new(),
            planned => format!(" (of {planned} allocated)"),
        };
        format!(
            "{} {} shards{planned}, {} entities, {:.1} MiB",
            self.verb,
            self.shards,
            self.entities,
            self.bytes as f64 / (1024.0 * 1024.0)
        )
    }

    fn draw(&self) {
        if self.terminal {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r{}", self.line());
            let _ = stderr.flush();
        }
    }

    fn finish(&self) {
        match self.terminal {
            true => eprintln!("\r{}", self.line()),
            false => eprintln!("{}", self.line()),
        }
    }
}
