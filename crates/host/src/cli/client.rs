//! The HTTP client behind the client commands: where the node is, which token to send, and
//! the exit codes scripts rely on (see `docs/cli.md`). The commands that message entities go
//! through the application client, `tessera-client` ([`Client::entities`]); the rest send one
//! request at a time with ureq.

use super::profiles;
use serde_json::Value as Json;
use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;
use ureq::SendBody;
use ureq::http::{Method, Request};

/// The node address when neither a flag, the environment nor a credentials file names one.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7070";

/// The longest a client command waits for one request (uploads included).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest a stream ([`Client::get_reader`]) may go without a byte: a stream as a whole
/// may take as long as its data needs (a backup of a large node), but a stalled one fails.
const STREAM_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest response the client reads.
const RESPONSE_BYTES_MAX: u64 = 64 << 20;

/// Where to connect and how to print, shared by every client command.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ClientArgs {
    /// The node's URL [default: the credentials file's, else http://127.0.0.1:7070].
    #[arg(long, env = "TESSERA_URL", global = true)]
    url: Option<String>,
    /// The bearer token [default: from the profile, ./.tessera/credentials or the default
    /// profile].
    #[arg(long, env = "TESSERA_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// The profile of the user's config to use (`tessera login`).
    #[arg(long, env = "TESSERA_PROFILE", global = true)]
    profile: Option<String>,
    /// Print the server's JSON instead of readable text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

/// Which token a command needs when none is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The default tenant's token.
    Tenant,
    /// The admin token.
    Admin,
}

/// Why a client command failed, and so its exit code.
#[derive(Debug)]
pub(crate) enum ClientError {
    /// The server answered with an error (exit 1); the body is its error JSON.
    Refused(u16, String),
    /// Bad usage, no token, or no connection (exit 2).
    Usage(String),
}

impl ClientError {
    /// Prints the error to stderr and gives its exit code.
    pub(crate) fn report(self) -> ExitCode {
        match self {
            ClientError::Refused(status, body) => {
                let body = body.trim();
                if body.is_empty() {
                    eprintln!("error: the server answered {status}");
                } else {
                    eprintln!("{body}");
                }
                ExitCode::from(1)
            }
            ClientError::Usage(message) => {
                eprintln!("error: {message}");
                ExitCode::from(2)
            }
        }
    }
}

/// A connection to one node with one token.
pub(crate) struct Client {
    agent: ureq::Agent,
    url: String,
    token: String,
}

impl Client {
    /// Resolves the URL and token from flags, environment, a profile and the credentials file.
    pub(crate) fn new(args: &ClientArgs, role: Role) -> Result<Client, ClientError> {
        let credentials =
            profiles::stored_credentials(args.profile.as_deref()).map_err(ClientError::Usage)?;
        let url = args
            .url
            .clone()
            .or_else(|| Some(credentials.url.clone()).filter(|url| !url.is_empty()))
            .unwrap_or_else(|| DEFAULT_URL.to_string());
        let stored = match role {
            Role::Tenant => credentials.tenant_token,
            Role::Admin => credentials.admin_token,
        };
        let token = args.token.clone().or(stored).ok_or_else(|| {
            ClientError::Usage(
                "no token: pass --token, set TESSERA_TOKEN, run `tessera login URL`, or run \
                 `tessera up` here"
                    .into(),
            )
        })?;
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build()
            .into();
        Ok(Client {
            agent,
            url: url.trim_end_matches('/').to_string(),
            token,
        })
    }

    /// The application client (`tessera-client`) over this node and token, and a runtime to
    /// run its calls on: for the commands that message entities. One attempt per command, as
    /// with every other command: a script sees the node's answer, not a retry's.
    pub(crate) fn entities(&self) -> Result<Entities, ClientError> {
        let client = tessera_client::Client::builder()
            .node(&self.url)
            .token(&self.token)
            .retry(tessera_client::Retry::never())
            .request_timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|error| ClientError::Usage(error.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| ClientError::Usage(format!("cannot start a runtime: {error}")))?;
        Ok(Entities { client, runtime })
    }

    /// The same token, against the node at `url`.
    pub(crate) fn at(&self, url: &str) -> Client {
        Client {
            agent: self.agent.clone(),
            url: url.trim_end_matches('/').to_string(),
            token: self.token.clone(),
        }
    }

    /// The node's URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// `GET path`, its body as a reader (binary answers and streams; the reader bounds what it
    /// holds, not how much passes), with no limit on the whole request's time but at most
    /// [`STREAM_READ_TIMEOUT`] between two reads.
    pub(crate) fn get_reader(&self, path: &str) -> Result<ureq::BodyReader<'static>, ClientError> {
        let url = format!("{}{path}", self.url);
        let request = Request::builder()
            .method(Method::GET)
            .uri(&url)
            .header("authorization", format!("Bearer {}", self.token))
            .body(())
            .map_err(|error| ClientError::Usage(format!("bad request to {url}: {error}")))?;
        let request = self
            .agent
            .configure_request(request)
            .timeout_global(None)
            .timeout_per_read(Some(STREAM_READ_TIMEOUT))
            .build();
        let response = self
            .agent
            .run(request)
            .map_err(|error| ClientError::Usage(format!("cannot reach {}: {error}", self.url)))?;
        let status = response.status().as_u16();
        let body = response.into_body();
        if status >= 400 {
            let text = body
                .into_with_config()
                .limit(RESPONSE_BYTES_MAX)
                .read_to_string()
                .unwrap_or_default();
            return Err(ClientError::Refused(status, text));
        }
        Ok(body.into_with_config().reader())
    }

    /// `GET path`.
    pub(crate) fn get(&self, path: &str) -> Result<Json, ClientError> {
        self.send(Method::GET, path, None, SendBody::none(), 0)
    }

    /// `method path` with a JSON body.
    pub(crate) fn json(
        &self,
        method: Method,
        path: &str,
        body: &Json,
    ) -> Result<Json, ClientError> {
        let bytes =
            serde_json::to_vec(body).map_err(|error| ClientError::Usage(error.to_string()))?;
        let mut reader = bytes.as_slice();
        let length = bytes.len() as u64;
        self.send(
            method,
            path,
            Some("application/json"),
            SendBody::from_reader(&mut reader),
            length,
        )
    }

    /// `POST path` with `length` bytes from `reader` as `content_type`.
    pub(crate) fn upload(
        &self,
        path: &str,
        content_type: &str,
        reader: &mut dyn Read,
        length: u64,
    ) -> Result<Json, ClientError> {
        self.send(
            Method::POST,
            path,
            Some(content_type),
            SendBody::from_reader(reader),
            length,
        )
    }

    fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: SendBody<'_>,
        length: u64,
    ) -> Result<Json, ClientError> {
        let url = format!("{}{path}", self.url);
        let mut request = Request::builder()
            .method(method)
            .uri(&url)
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "application/json");
        if let Some(content_type) = content_type {
            request = request
                .header("content-type", content_type)
                .header("content-length", length.to_string());
        }
        let request = request
            .body(body)
            .map_err(|error| ClientError::Usage(format!("bad request to {url}: {error}")))?;
        let mut response = self
            .agent
            .run(request)
            .map_err(|error| ClientError::Usage(format!("cannot reach {}: {error}", self.url)))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(RESPONSE_BYTES_MAX)
            .read_to_string()
            .map_err(|error| ClientError::Usage(format!("cannot read the answer: {error}")))?;
        if status >= 400 {
            return Err(ClientError::Refused(status, text));
        }
        if text.trim().is_empty() {
            return Ok(Json::Null);
        }
        serde_json::from_str(&text)
            .map_err(|error| ClientError::Usage(format!("the server answered non-JSON: {error}")))
    }
}

/// The application client of the commands that message entities, with the runtime its calls
/// run on.
pub(crate) struct Entities {
    client: tessera_client::Client,
    runtime: tokio::runtime::Runtime,
}

impl Entities {
    /// Runs `call` with the client to its end; its error as the command's.
    pub(crate) fn run<T>(
        &self,
        call: impl AsyncFnOnce(&tessera_client::Client) -> Result<T, tessera_client::Error>,
    ) -> Result<T, ClientError> {
        self.runtime
            .block_on(call(&self.client))
            .map_err(ClientError::from)
    }
}

impl From<tessera_client::Error> for ClientError {
    /// An answer of the node is a refusal (exit 1, its body printed as it came); anything
    /// else — no connection, no answer, a reply that is not JSON — is exit 2.
    fn from(error: tessera_client::Error) -> Self {
        use tessera_client::Error;
        match error {
            Error::Api(refusal) => ClientError::Refused(refusal.status(), refusal.body().into()),
            Error::Protocol { status, body, .. } => ClientError::Refused(status, body),
            Error::Decode(error) => {
                ClientError::Usage(format!("the server answered non-JSON: {error}"))
            }
            other => ClientError::Usage(other.to_string()),
        }
    }
}

pub(crate) use tessera_client::segment;
