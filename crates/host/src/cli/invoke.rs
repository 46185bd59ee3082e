//! `tessera invoke`: run one entity of a component locally, against a scratch (or given) data
//! directory, and print each reply as one JSON line.

use super::output::outln;
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tessera_codec::{json_to_msgpack, msgpack_to_json};
use tessera_contract::{ErrorKind, MessageError, TypeKey};
use tessera_entity::{Entities, EntityConfig, EntityParts, TypeBinding, TypeTable};
use tessera_runtime::{InstanceLimits, Runtime, RuntimeConfig};
use tessera_state::{GroupCommitConfig, LocalState, StateStore};

/// The tenant `invoke` runs entities in.
pub const INVOKE_TENANT: &str = "local";

#[derive(Debug, clap::Args)]
pub(crate) struct InvokeArgs {
    /// The component to run.
    component: PathBuf,
    /// The entity id.
    entity_id: String,
    /// Messages as JSON, e.g. '{"Add":5}' '"Get"'.
    messages: Vec<String>,
    /// Keep state here across invocations (default: a scratch directory).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// How long to wait for each reply.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
}

/// What `invoke` runs.
#[derive(Debug, Clone)]
pub struct InvokeOptions {
    /// The component file; its stem names the entity type.
    pub component: PathBuf,
    /// The entity id.
    pub entity_id: String,
    /// The messages, as JSON values.
    pub messages: Vec<Json>,
    /// Data directory holding `tessera.redb` and compiled plugins.
    pub data_dir: PathBuf,
    /// Reply timeout per message.
    pub timeout: Duration,
}

pub(crate) fn run(args: InvokeArgs) -> ExitCode {
    let mut messages = Vec::with_capacity(args.messages.len());
    for (index, text) in args.messages.iter().enumerate() {
        match serde_json::from_str::<Json>(text) {
            Ok(json) => messages.push(json),
            Err(error) => {
                let error = MessageError::new(
                    ErrorKind::BadMessage,
                    format!("message {} is not JSON: {error}", index + 1),
                );
                outln!("{}", error_json(&error));
                return ExitCode::FAILURE;
            }
        }
    }
    let scratch = match &args.data_dir {
        Some(_) => None,
        None => match tempfile::tempdir() {
            Ok(dir) => Some(dir),
            Err(error) => {
                eprintln!("error: cannot make a scratch directory: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    let data_dir = args
        .data_dir
        .clone()
        .or_else(|| scratch.as_ref().map(|dir| dir.path().to_path_buf()))
        .expect("invariant: either --data-dir or a scratch dir is set");
    let options = InvokeOptions {
        component: args.component,
        entity_id: args.entity_id,
        messages,
        data_dir,
        timeout: Duration::from_millis(args.timeout_ms),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    let outcome = runtime.block_on(invoke(options, |reply| match reply {
        Ok(json) => outln!("{json}"),
        Err(error) => {
            failed = true;
            outln!("{}", error_json(error));
        }
    }));
    match outcome {
        Ok(()) if !failed => ExitCode::SUCCESS,
        Ok(()) => ExitCode::FAILURE,
        Err(error) => {
            outln!("{}", error_json(&error));
            ExitCode::FAILURE
        }
    }
}

fn error_json(error: &MessageError) -> Json {
    json!({"error": {"code": error.kind.code(), "message": error.message}})
}

/// Runs `options.messages` in order through one entity and hands each reply (as JSON) to
/// `on_reply`; stops at the first failed message. `Err` means the entity could not be set up.
pub async fn invoke(
    options: InvokeOptions,
    mut on_reply: impl FnMut(&Result<Json, MessageError>),
) -> Result<(), MessageError> {
    let setup = |error: String| MessageError::new(ErrorKind::Instantiation, error);
    let entity_type = component_type_name(&options.component);
    let bytes = std::fs::read(&options.component).map_err(|error| {
        setup(format!(
            "cannot read {}: {error}",
            options.component.display()
        ))
    })?;
    let runtime = Runtime::new(RuntimeConfig {
        instances_max: 16,
        compiled_cache_dir: Some(options.data_dir.join("compiled")),
        ..RuntimeConfig::default()
    })
    .map_err(|error| setup(format!("{error:#}")))?;
    let runtime = Arc::new(runtime);
    let plugin = {
        let runtime = runtime.clone();
        tokio::task::spawn_blocking(move || runtime.load(&bytes))
            .await
            .map_err(|error| setup(error.to_string()))?
            .map_err(|error| setup(error.to_string()))?
    };
    let store = StateStore::open(&options.data_dir.join("tessera.redb"))
        .map_err(|error| setup(error.to_string()))?;
    let state = Arc::new(LocalState::new(store, GroupCommitConfig::default()));
    let types = Arc::new(TypeTable::default());
    let type_key = TypeKey::new(INVOKE_TENANT, entity_type);
    types.bind(
        type_key.clone(),
        TypeBinding {
            plugin,
            version: 1,
            limits: InstanceLimits::default(),
            passivate_idle: None,
            mailbox_capacity: 64,
            tenant_live_entities_max: None,
            remember: false,
        },
    );
    let entities = Entities::standalone(EntityParts {
        runtime,
        state,
        types,
        remember: None,
        config: EntityConfig::default(),
    });
    let address = type_key.entity(options.entity_id.clone());
    for message in &options.messages {
        let payload = serde_json::to_vec(message)
            .map_err(|error| error.to_string())
            .and_then(|json| json_to_msgpack(&json).map_err(|error| error.to_string()))
            .map_err(|error| MessageError::new(ErrorKind::BadMessage, error));
        let reply = match payload {
            Ok(payload) => {
                entities
                    .ask(address.clone(), 0, payload, options.timeout)
                    .await
            }
            Err(error) => Err(error),
        };
        let reply = reply.and_then(|bytes| {
            msgpack_to_json(&bytes)
                .map_err(|error| error.to_string())
                .and_then(|json| serde_json::from_slice(&json).map_err(|e| e.to_string()))
                .map_err(|error| MessageError::new(ErrorKind::Failed, error))
        });
        on_reply(&reply);
        if reply.is_err() {
            break;
        }
    }
    entities.stop_all().await;
    Ok(())
}

/// The entity type a component runs as under `invoke`: its file stem.
fn component_type_name(component: &Path) -> String {
    component
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_else(|| "entity".into())
}
