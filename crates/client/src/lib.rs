//! Talk to Tessera from an application: typed [`Client::ask`] and [`Client::tell`] over the
//! HTTP API (`docs/api.md`), with serde types for messages and replies.
//!
//! A client holds the addresses of one or more nodes and a tenant token. Each call goes to
//! one node and, when it fails in a way that is safe to try again, to the next after a
//! backoff ([`Retry`]): a request that was certainly not taken (no connection, `503
//! unavailable`, `shard_unavailable`, `mailbox_full`, `buffer_overflow`) is always tried
//! again; one whose outcome is unknown (a connection broken after sending, no answer in time)
//! only when running it twice is impossible — a [`Client::tell`], which carries an
//! idempotency key that every retry repeats; a definite refusal ([`ErrorKind::Rejected`],
//! [`ErrorKind::BadMessage`], ...) never. Errors are [`Error`], with the API's codes as
//! [`ErrorKind`]. See `docs/client.md` for a complete program.
//!
//! ```no_run
//! use serde::Serialize;
//! use tessera_client::{Client, Error, ErrorKind};
//!
//! #[derive(Serialize)]
//! enum Account { Deposit(u64), Withdraw(u64) }
//!
//! # async fn example() -> Result<(), Error> {
//! let client = Client::builder()
//!     .nodes(["http://127.0.0.1:7070", "http://127.0.0.1:7071", "http://127.0.0.1:7072"])
//!     .token("the tenant's token")
//!     .build()?;
//! client.tell("bank-account", "alice", &Account::Deposit(100)).await?;
//! match client.ask::<_, u64>("bank-account", "alice", &Account::Withdraw(500)).await {
//!     Ok(balance) => println!("left: {balance}"),
//!     Err(error) if error.kind() == Some(ErrorKind::Rejected) => println!("refused: {error}"),
//!     Err(error) => return Err(error),
//! }
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod client;
mod error;
mod retry;
mod state;
mod transport;

pub use client::{Client, ClientBuilder, IDEMPOTENCY_KEY_BYTES_MAX, new_idempotency_key, segment};
pub use error::{ApiError, Error, ErrorKind};
pub use retry::Retry;
pub use state::{EntityState, StateEntry, StateValue};
