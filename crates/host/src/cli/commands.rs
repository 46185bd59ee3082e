//! The client commands: each is one HTTP request to a node (see `docs/cli.md`), printed
//! readably or, with `--json`, as the server's JSON. Messages to entities (`tell`, `ask`,
//! `passivate`, `state`) go through `tessera-client`, the rest through the CLI's own requests.

use super::client::{Client, ClientArgs, ClientError, Role, segment};
use super::output::outln;
use super::progress::ProgressReader;
use serde_json::{Value as Json, json};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tessera_client::StateValue;
use ureq::http::Method;

/// `tessera deploy <wasm> --type T [--remember] [--passivate-idle-ms N]`.
#[derive(Debug, clap::Args)]
pub(crate) struct DeployArgs {
    /// The component to upload.
    wasm: PathBuf,
    /// The entity type to deploy it as.
    #[arg(long = "type", value_name = "TYPE")]
    entity_type: String,
    /// Remember started entities and bring them back after a restart.
    #[arg(long)]
    remember: bool,
    /// Passivate entities idle for this long.
    #[arg(long, value_name = "MS")]
    passivate_idle_ms: Option<u64>,
    /// Replicas of the partitions that keep the type's entities, in a cluster (default: the
    /// tenant's, else the cluster's). Fixed by the type's first deploy.
    #[arg(long, value_name = "R")]
    replication_factor: Option<u8>,
    #[command(flatten)]
    client: ClientArgs,
}

/// Commands with no argument but the connection (`types`, `status`).
#[derive(Debug, clap::Args)]
pub(crate) struct PlainArgs {
    #[command(flatten)]
    client: ClientArgs,
}

/// `tessera rollback T --to V`.
#[derive(Debug, clap::Args)]
pub(crate) struct RollbackArgs {
    /// The entity type.
    entity_type: String,
    /// The version to make active.
    #[arg(long)]
    to: u32,
    #[command(flatten)]
    client: ClientArgs,
}

/// `tessera entities T [--after ID] [--limit N]`.
#[derive(Debug, clap::Args)]
pub(crate) struct EntitiesArgs {
    /// The entity type.
    entity_type: String,
    /// List the ids after this one (the `next:` a previous page printed).
    #[arg(long, value_name = "ID")]
    after: Option<String>,
    /// At most this many ids (the server's default and maximum apply).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    #[command(flatten)]
    client: ClientArgs,
}

/// `tessera tell|ask T/ID JSON`.
#[derive(Debug, clap::Args)]
pub(crate) struct MessageArgs {
    /// The entity: `type/id`.
    entity: String,
    /// The message, as JSON (e.g. '{"Add":1}' or '"Get"').
    message: String,
    /// Ask only: how long to wait for the reply.
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    #[command(flatten)]
    client: ClientArgs,
}

/// `tessera passivate|state T/ID`.
#[derive(Debug, clap::Args)]
pub(crate) struct EntityArgs {
    /// The entity: `type/id`.
    entity: String,
    #[command(flatten)]
    client: ClientArgs,
}

/// `tessera tenant ...` (admin token).
#[derive(Debug, clap::Args)]
pub(crate) struct TenantArgs {
    #[command(subcommand)]
    command: TenantCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Subcommand)]
enum TenantCommand {
    /// Create a tenant and print its token (shown only once).
    Create {
        /// The tenant's name.
        name: String,
    },
    /// List the tenants.
    List,
    /// Show one tenant and its quotas.
    Show {
        /// The tenant's name.
        name: String,
    },
}

fn finish(result: Result<(), ClientError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => error.report(),
    }
}

fn print_json(json: &Json) {
    outln!(
        "{}",
        serde_json::to_string_pretty(json).unwrap_or_else(|_| json.to_string())
    );
}

/// `type/id` → the entity's type and id (the id may hold further slashes).
fn entity_of(entity: &str) -> Result<(&str, &str), ClientError> {
    match entity.split_once('/') {
        Some((entity_type, id)) if !entity_type.is_empty() && !id.is_empty() => {
            Ok((entity_type, id))
        }
        _ => Err(ClientError::Usage(format!(
            "{entity:?} is not an entity: write type/id, e.g. counter/c1"
        ))),
    }
}

fn parse_message(text: &str) -> Result<Json, ClientError> {
    serde_json::from_str(text).map_err(|error| {
        ClientError::Usage(format!(
            "the message is not JSON ({error}); quote strings: '\"Get\"'"
        ))
    })
}

pub(crate) fn deploy(args: DeployArgs) -> ExitCode {
    finish((|| {
        let client = Client::new(&args.client, Role::Tenant)?;
        let file = std::fs::File::open(&args.wasm).map_err(|error| {
            ClientError::Usage(format!("cannot open {}: {error}", args.wasm.display()))
        })?;
        let length = file
            .metadata()
            .map_err(|error| ClientError::Usage(error.to_string()))?
            .len();
        let mut query = format!("remember={}", args.remember);
        if let Some(idle) = args.passivate_idle_ms {
            query.push_str(&format!("&passivate_idle_ms={idle}"));
        }
        if let Some(factor) = args.replication_factor {
            query.push_str(&format!("&replication_factor={factor}"));
        }
        let path = format!("/v1/types/{}/versions?{query}", segment(&args.entity_type));
        let mut reader = ProgressReader::new(file, length);
        let deployed = client.upload(&path, "application/wasm", &mut reader, length)?;
        if args.client.json {
            print_json(&deployed);
        } else {
            outln!(
                "deployed {} version {} ({} bytes, sha256 {})",
                args.entity_type,
                deployed["version"],
                deployed["size_bytes"],
                deployed["sha256"].as_str().unwrap_or("?")
            );
        }
        Ok(())
    })())
}

pub(crate) fn types(args: PlainArgs) -> ExitCode {
    finish((|| {
        let types = Client::new(&args.client, Role::Tenant)?.get("/v1/types")?;
        if args.client.json {
            print_json(&types);
            return Ok(());
        }
        let list = types["types"].as_array().cloned().unwrap_or_default();
        if list.is_empty() {
            outln!("no entity types deployed");
        }
        for record in list {
            let versions = record["versions"].as_array().map_or(0, Vec::len);
            outln!(
                "{:<24} active version {:<4} ({versions} deployed)",
                record["name"].as_str().unwrap_or("?"),
                record["active_version"]
            );
        }
        Ok(())
    })())
}

pub(crate) fn entities(args: EntitiesArgs) -> ExitCode {
    finish((|| {
        let mut query = Vec::new();
        if let Some(after) = &args.after {
            query.push(format!("after={}", segment(after)));
        }
        if let Some(limit) = args.limit {
            query.push(format!("limit={limit}"));
        }
        let mut path = format!("/v1/types/{}/entities", segment(&args.entity_type));
        if !query.is_empty() {
            path.push_str(&format!("?{}", query.join("&")));
        }
        let page = Client::new(&args.client, Role::Tenant)?.get(&path)?;
        if args.client.json {
            print_json(&page);
            return Ok(());
        }
        for id in page["ids"].as_array().cloned().unwrap_or_default() {
            outln!("{}", id.as_str().unwrap_or("?"));
        }
        let mut footer = format!("{} listed", page["count"]);
        if let Some(total) = page["total"].as_u64() {
            footer.push_str(&format!(" of {total}"));
        }
        if let Some(next) = page["next_after"].as_str() {
            footer.push_str(&format!("; next page: --after {next}"));
        }
        eprintln!("{footer}");
        Ok(())
    })())
}

pub(crate) fn rollback(args: RollbackArgs) -> ExitCode {
    finish((|| {
        let path = format!("/v1/types/{}/active", segment(&args.entity_type));
        let record = Client::new(&args.client, Role::Tenant)?.json(
            Method::PUT,
            &path,
            &json!({ "version": args.to }),
        )?;
        if args.client.json {
            print_json(&record);
        } else {
            outln!(
                "{}: active version is now {}",
                args.entity_type,
                record["active_version"]
            );
        }
        Ok(())
    })())
}

pub(crate) fn tell(args: MessageArgs) -> ExitCode {
    finish((|| {
        let (entity_type, id) = entity_of(&args.entity)?;
        let message = parse_message(&args.message)?;
        let entities = Client::new(&args.client, Role::Tenant)?.entities()?;
        entities.run(async |client| client.tell_at_most_once(entity_type, id, &message).await)?;
        if args.client.json {
            print_json(&json!({ "status": "accepted" }));
        } else {
            outln!("accepted");
        }
        Ok(())
    })())
}

pub(crate) fn ask(args: MessageArgs) -> ExitCode {
    finish((|| {
        let (entity_type, id) = entity_of(&args.entity)?;
        let message = parse_message(&args.message)?;
        let entities = Client::new(&args.client, Role::Tenant)?.entities()?;
        let reply: Json = entities.run(async |client| match args.timeout_ms {
            Some(timeout) => {
                let timeout = Duration::from_millis(timeout);
                client.ask_within(entity_type, id, &message, timeout).await
            }
            None => client.ask(entity_type, id, &message).await,
        })?;
        if args.client.json {
            outln!("{reply}");
        } else {
            print_json(&reply);
        }
        Ok(())
    })())
}

pub(crate) fn passivate(args: EntityArgs) -> ExitCode {
    finish((|| {
        let (entity_type, id) = entity_of(&args.entity)?;
        let entities = Client::new(&args.client, Role::Tenant)?.entities()?;
        entities.run(async |client| client.passivate(entity_type, id).await)?;
        if args.client.json {
            print_json(&json!({ "status": "passivating" }));
        } else {
            outln!("passivating {}", args.entity);
        }
        Ok(())
    })())
}

pub(crate) fn state(args: EntityArgs) -> ExitCode {
    finish((|| {
        let (entity_type, id) = entity_of(&args.entity)?;
        let entities = Client::new(&args.client, Role::Tenant)?.entities()?;
        let state = entities.run(async |client| client.state(entity_type, id).await)?;
        if args.client.json {
            let json = serde_json::to_value(&state)
                .map_err(|error| ClientError::Usage(error.to_string()))?;
            print_json(&json);
            return Ok(());
        }
        if state.entries.is_empty() {
            outln!("{} has no state", args.entity);
        }
        for entry in state.entries {
            let value = match entry.value {
                StateValue::Json(value) => value,
                StateValue::RawBase64(base64) => Json::String(base64),
            };
            outln!("{} = {value}", entry.key);
        }
        Ok(())
    })())
}

pub(crate) fn status(args: PlainArgs) -> ExitCode {
    finish((|| {
        let status = Client::new(&args.client, Role::Tenant)?.get("/v1/status")?;
        if args.client.json {
            print_json(&status);
            return Ok(());
        }
        let types = status["types"].as_array().cloned().unwrap_or_default();
        if types.is_empty() {
            outln!("no entity types deployed");
        }
        for entry in types {
            outln!(
                "{:<24} version {:<4} live {:<6} remembered {:<6}{}",
                entry["entity_type"].as_str().unwrap_or("?"),
                entry["active_version"],
                entry["live_entities"],
                entry["remembered_entities"],
                if entry["remember"] == json!(true) {
                    " (remember)"
                } else {
                    ""
                }
            );
        }
        Ok(())
    })())
}

pub(crate) fn tenant(args: TenantArgs) -> ExitCode {
    finish((|| {
        let client = Client::new(&args.client, Role::Admin)?;
        match args.command {
            TenantCommand::Create { name } => {
                let tenant = client.json(Method::POST, "/v1/tenants", &json!({ "name": name }))?;
                if args.client.json {
                    outln!("{tenant}");
                } else {
                    outln!("created tenant {name}");
                    outln!(
                        "token: {} (shown once; keep it)",
                        tenant["token"].as_str().unwrap_or("?")
                    );
                }
            }
            TenantCommand::List => {
                let tenants = client.get("/v1/tenants")?;
                if args.client.json {
                    print_json(&tenants);
                } else {
                    for tenant in tenants["tenants"].as_array().cloned().unwrap_or_default() {
                        outln!("{}", tenant["name"].as_str().unwrap_or("?"));
                    }
                }
            }
            TenantCommand::Show { name } => {
                let tenant = client.get(&format!("/v1/tenants/{}", segment(&name)))?;
                print_json(&tenant);
            }
        }
        Ok(())
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entities_are_type_slash_id() {
        assert_eq!(entity_of("counter/c1").unwrap(), ("counter", "c1"));
        assert_eq!(entity_of("counter/a/b").unwrap(), ("counter", "a/b"));
        assert!(entity_of("counter").is_err());
        assert!(entity_of("/c1").is_err());
        assert!(entity_of("counter/").is_err());
    }
}
