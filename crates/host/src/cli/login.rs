//! `tessera login URL`: checks a token against a node with one request and stores both in a
//! profile of the user's CLI config ([`super::profiles`]), so the client commands work from any
//! directory. The request, `GET /v1/tenants`, also tells which token it is: the admin token is
//! answered 200, a tenant's token 403 (known, but not the admin's), anything else 401.

use super::profiles::{self, CliConfig, DEFAULT_PROFILE};
use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;
use std::time::Duration;

/// How long the check may take: one small request.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest token read from standard input (tokens are tens of bytes).
const TOKEN_BYTES_MAX: u64 = 4096;

/// The longest error answer kept for the message.
const ANSWER_BYTES_MAX: u64 = 64 * 1024;

/// `tessera login URL [--token T] [--profile NAME]`.
#[derive(Debug, clap::Args)]
pub(crate) struct LoginArgs {
    /// The node's URL, e.g. https://tessera.example.com or http://127.0.0.1:7070.
    url: String,
    /// The token (the admin token or a tenant's) [default: one line from standard input].
    #[arg(long)]
    token: Option<String>,
    /// The profile to write [default: default].
    #[arg(long, env = "TESSERA_PROFILE")]
    profile: Option<String>,
}

/// Which token a login was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Admin,
    Tenant,
}

pub(crate) fn login(args: LoginArgs) -> ExitCode {
    match run(args) {
        Ok(message) => {
            println!("{message}");
            ExitCode::SUCCESS
        }
        Err(Refusal::Refused(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
        Err(Refusal::Usage(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

/// Why a login failed: the node refused the token (exit 1), or anything else (exit 2).
enum Refusal {
    Refused(String),
    Usage(String),
}

fn run(args: LoginArgs) -> Result<String, Refusal> {
    let profile = args.profile.as_deref().unwrap_or(DEFAULT_PROFILE);
    profiles::validate_profile(profile).map_err(Refusal::Usage)?;
    let url = args.url.trim().trim_end_matches('/').to_string();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(Refusal::Usage(format!(
            "{url:?} is not a node URL (http://host:port or https://host)"
        )));
    }
    let token = match args.token {
        Some(token) => token.trim().to_string(),
        None => read_token().map_err(Refusal::Usage)?,
    };
    if token.is_empty() {
        return Err(Refusal::Usage(
            "no token: pass --token or pipe it in".into(),
        ));
    }
    let kind = check(&url, &token)?;
    let path = profiles::config_path().ok_or_else(|| {
        Refusal::Usage("neither XDG_CONFIG_HOME nor HOME is set: nowhere to keep the login".into())
    })?;
    let mut config = CliConfig::load(&path).map_err(Refusal::Usage)?;
    let entry = config.profiles.entry(profile.to_string()).or_default();
    if entry.url != url {
        // Tokens of another node are no use here.
        *entry = Default::default();
        entry.url = url.clone();
    }
    match kind {
        Kind::Admin => entry.admin_token = Some(token),
        Kind::Tenant => entry.tenant_token = Some(token),
    }
    config.save(&path).map_err(Refusal::Usage)?;
    let role = match kind {
        Kind::Admin => "the admin token",
        Kind::Tenant => "a tenant token",
    };
    Ok(format!(
        "logged in to {url} with {role}; profile {profile} saved in {}",
        path.display()
    ))
}

/// One line from standard input, with a prompt on a terminal.
fn read_token() -> Result<String, String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("token: ");
    }
    let mut line = String::new();
    std::io::Read::take(stdin.lock(), TOKEN_BYTES_MAX)
        .read_line(&mut line)
        .map_err(|error| format!("cannot read the token from standard input: {error}"))?;
    Ok(line.trim().to_string())
}

/// `GET /v1/tenants` with the token: 200 is the admin token, 403 a tenant's, 401 none.
fn check(url: &str, token: &str) -> Result<Kind, Refusal> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(LOGIN_TIMEOUT))
        .build()
        .into();
    let mut response = agent
        .get(format!("{url}/v1/tenants"))
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json")
        .call()
        .map_err(|error| Refusal::Usage(format!("cannot reach {url}: {error}")))?;
    let status = response.status().as_u16();
    match status {
        200 => Ok(Kind::Admin),
        403 => Ok(Kind::Tenant),
        _ => {
            let body = response
                .body_mut()
                .with_config()
                .limit(ANSWER_BYTES_MAX)
                .read_to_string()
                .unwrap_or_default();
            let said = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|json| json["error"]["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| body.trim().to_string());
            if status == 401 {
                Err(Refusal::Refused(format!(
                    "{url} refused the token ({said}); nothing was saved"
                )))
            } else {
                Err(Refusal::Refused(format!(
                    "{url} answered {status} ({said}); is it a Tessera node? nothing was saved"
                )))
            }
        }
    }
}
