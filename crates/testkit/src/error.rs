//! The testkit's errors: [`TestkitError`] for loading components, [`SimError`] for what a
//! simulation step or a client message can meet.

use tessera_contract::MessageError;

/// Loading the engine or a component failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// The wasmtime engine did not start.
    #[error("the engine did not start: {0}")]
    Engine(String),
    /// The component file could not be read.
    #[error("reading the component {path} failed: {error} (build it first: tessera build)")]
    Read {
        /// The path given.
        path: String,
        /// Why.
        error: String,
    },
    /// The file is not a component of the entity world.
    #[error("the component {path} did not load: {error}")]
    Load {
        /// The path given.
        path: String,
        /// Why.
        error: String,
    },
}

/// What went wrong in a simulation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The entity answered a client's message with an error (or the host refused it).
    #[error("{0}")]
    Message(#[from] MessageError),
    /// The simulated node could not (re)start: its store did not open.
    #[error("the simulated node did not start: {0}")]
    Start(String),
    /// Reading or committing the simulated store failed.
    #[error("the simulated store failed: {0}")]
    Store(String),
    /// A message or a stored value did not encode or decode as the type asked for.
    #[error("encoding: {0}")]
    Codec(String),
    /// A restart after a crash failed earlier, so the simulation has no node to run.
    #[error("the simulated node is down: a restart failed earlier")]
    Stopped,
    /// Messaging was still busy after the step budget: tells or reminders keep making more.
    #[error("messaging did not settle within {steps} steps")]
    NotQuiet {
        /// The budget that ran out.
        steps: u64,
    },
}
