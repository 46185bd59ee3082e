//! Plugin bytes between nodes, beside the metadata plane and never through it. The node that
//! takes a deploy stores the blob and asks the other voters to hold it ([`BlobTransfer::replicate`]);
//! each fetches it from the uploader, and the deploy's command is submitted only once a majority
//! of the voters holds it, so any quorum that can commit or recover the catalog includes a node
//! that can serve the bytes of every committed version. A node whose catalog names a blob it
//! lacks (the voter left out, a member, a node after a wiped disk) fetches it the same way
//! ([`BlobTransfer::fetch`]).
//!
//! A fetch is pulled one chunk ([`BLOB_CHUNK_BYTES`](tessera_metadata::BLOB_CHUNK_BYTES)) per
//! request, at most [`BLOB_FETCHES_MAX`]
//! at once per node: the blob bytes queued for any one peer are bounded by
//! `BLOB_FETCHES_MAX * BLOB_CHUNK_BYTES`, so a heartbeat, a prepare or a lease renewal queued
//! behind them waits for about a megabyte, never for a whole plugin. The whole blob is hashed
//! before it is stored ([`tessera_metadata::BlobAssembly`]); a peer that sends bad chunks is
//! left for the next one.

use super::mesh::Mesh;
use super::peer_message::PeerMessage;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_cluster::Responder;
use tessera_metadata::{BlobAssembly, BlobStore, MemberState, MetadataStore};
use tokio::sync::Semaphore;

/// Blob fetches this node runs at once; with one chunk in flight each, this bounds the blob
/// bytes any peer queues for this node to two chunks.
pub(crate) const BLOB_FETCHES_MAX: usize = 2;

/// Distinct blobs waiting to be fetched, or being fetched; past it a fetch is refused (a
/// background fetch is asked again when its type is next bound, a hold is answered missing).
pub(crate) const BLOB_FETCHES_QUEUED_MAX: usize = 256;

/// Requests to hold a blob this node serves at once (each a task that fetches or waits); past
/// it a request is answered missing at once, and its sender counts this voter out.
pub(crate) const BLOB_HOLDS_MAX: usize = 64;

/// How long one chunk may take to come, before the fetch tries the next peer.
const BLOB_CHUNK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a voter may take to hold a blob it was asked to (a whole fetch).
pub(crate) const BLOB_HOLD_TIMEOUT: Duration = Duration::from_secs(120);

/// How often a task waiting for another's fetch of the same blob looks again.
const BLOB_WAIT_POLL: Duration = Duration::from_millis(100);

/// A node's side of moving plugin blobs.
pub(crate) struct BlobTransfer {
    mesh: Arc<Mesh>,
    blobs: BlobStore,
    /// The applied catalog: only its members (and the voters) are asked for blobs.
    catalog: MetadataStore,
    fetches: Semaphore,
    /// Holds being served ([`BLOB_HOLDS_MAX`]).
    hold_permits: Arc<Semaphore>,
    /// Blobs being fetched (bounded by [`BLOB_FETCHES_QUEUED_MAX`]).
    in_flight: Mutex<HashSet<String>>,
}

/// Removes a blob from the in-flight set when its fetch ends, however it ends.
struct InFlight<'a> {
    transfer: &'a BlobTransfer,
    sha256: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.transfer.in_flight_lock().remove(&self.sha256);
    }
}

impl BlobTransfer {
    pub(crate) fn new(mesh: Arc<Mesh>, blobs: BlobStore, catalog: MetadataStore) -> BlobTransfer {
        BlobTransfer {
            mesh,
            blobs,
            catalog,
            fetches: Semaphore::new(BLOB_FETCHES_MAX),
            hold_permits: Arc::new(Semaphore::new(BLOB_HOLDS_MAX)),
            in_flight: Mutex::default(),
        }
    }

    /// How many voters must hold a blob before its version is committed: a majority.
    pub(crate) fn quorum(&self) -> usize {
        self.mesh.voters.len() / 2 + 1
    }

    /// Makes sure a majority of the voters holds `sha256`, which this node holds: asks every
    /// other voter to hold it and returns once enough have said so (the others go on fetching).
    pub(crate) async fn replicate(&self, sha256: &str, size_bytes: u64) -> Result<usize, String> {
        let quorum = self.quorum();
        let mut held = usize::from(self.mesh.voters.contains(&self.mesh.node));
        let mut asks = tokio::task::JoinSet::new();
        for voter in self.mesh.voters.iter().filter(|v| **v != self.mesh.node) {
            let (mesh, voter) = (self.mesh.clone(), voter.clone());
            let message = PeerMessage::BlobHold {
                sha256: sha256.to_string(),
                size_bytes,
            };
            asks.spawn(async move {
                let answer = mesh.request(&voter, &message, BLOB_HOLD_TIMEOUT).await;
                (voter, answer)
            });
        }
        let mut refusals = Vec::new();
        while held < quorum {
            let Some(joined) = asks.join_next().await else {
                return Err(format!(
                    "only {held} of the {quorum} voters needed hold plugin {sha256} ({})",
                    refusals.join("; ")
                ));
            };
            match joined {
                Ok((_, Ok(PeerMessage::BlobHeld { sha256: named }))) if named == sha256 => {
                    held += 1
                }
                Ok((voter, Ok(PeerMessage::BlobMissing { why, .. }))) => {
                    refusals.push(format!("{voter}: {why}"))
                }
                Ok((voter, Ok(_))) => refusals.push(format!("{voter}: an unexpected answer")),
                Ok((voter, Err(error))) => refusals.push(format!("{voter}: {error}")),
                Err(error) => refusals.push(error.to_string()),
            }
        }
        // The voters still fetching go on: their answers are no longer waited for.
        asks.detach_all();
        Ok(held)
    }

    /// Fetches `sha256` of `size_bytes` unless this node holds it: from `first` if given, then
    /// from every voter and peer in turn, chunk by chunk; stored only once it hashes right.
    pub(crate) async fn fetch(
        &self,
        sha256: &str,
        size_bytes: u64,
        first: Option<&str>,
    ) -> Result<(), String> {
        let _in_flight = self.enter(sha256)?;
        let _permit = self
            .fetches
            .acquire()
            .await
            .map_err(|_| "the node is stopping".to_string())?;
        if self.holds(sha256)? {
            return Ok(());
        }
        let mut peers: Vec<String> = first.map(str::to_string).into_iter().collect();
        for peer in self.mesh.voters.iter().chain(&self.members()) {
            if *peer != self.mesh.node && !peers.contains(peer) {
                peers.push(peer.clone());
            }
        }
        let mut failures = Vec::new();
        for peer in &peers {
            match self.fetch_from(peer, sha256, size_bytes).await {
                Ok(bytes) => return self.store(sha256, bytes).await,
                Err(why) => failures.push(format!("{peer}: {why}")),
            }
        }
        Err(format!(
            "no peer served plugin {sha256} ({})",
            failures.join("; ")
        ))
    }

    /// Fetches `sha256` like [`BlobTransfer::fetch`], or, while another task of this node
    /// fetches it, waits (up to [`BLOB_HOLD_TIMEOUT`]) until this node holds it.
    pub(crate) async fn fetch_or_wait(
        &self,
        sha256: &str,
        size_bytes: u64,
        first: Option<&str>,
    ) -> Result<(), String> {
        let fetched = self.fetch(sha256, size_bytes, first).await;
        if fetched.is_ok() || !self.in_flight_lock().contains(sha256) {
            return fetched;
        }
        let deadline = tokio::time::Instant::now() + BLOB_HOLD_TIMEOUT;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(BLOB_WAIT_POLL).await;
            if self.holds(sha256)? {
                return Ok(());
            }
            if !self.in_flight_lock().contains(sha256) {
                return self.fetch(sha256, size_bytes, first).await;
            }
        }
        fetched
    }

    /// The members of the applied catalog that may hold blobs (not down, not removed): the
    /// only nodes besides the voters whose chunks this node takes.
    fn members(&self) -> Vec<String> {
        let members = self.catalog.members().unwrap_or_default();
        members
            .into_iter()
            .filter(|member| !matches!(member.state, MemberState::Down | MemberState::Removed))
            .map(|member| member.node)
            .collect()
    }

    /// Whether this node holds `sha256`.
    pub(crate) fn holds(&self, sha256: &str) -> Result<bool, String> {
        Ok(self
            .blobs
            .size(sha256)
            .map_err(|error| error.to_string())?
            .is_some())
    }

    fn enter(&self, sha256: &str) -> Result<InFlight<'_>, String> {
        let mut in_flight = self.in_flight_lock();
        if in_flight.len() >= BLOB_FETCHES_QUEUED_MAX {
            return Err(format!(
                "{BLOB_FETCHES_QUEUED_MAX} plugin fetches are waiting already"
            ));
        }
        if !in_flight.insert(sha256.to_string()) {
            return Err(format!("plugin {sha256} is being fetched already"));
        }
        Ok(InFlight {
            transfer: self,
            sha256: sha256.to_string(),
        })
    }

    async fn fetch_from(
        &self,
        peer: &str,
        sha256: &str,
        size_bytes: u64,
    ) -> Result<Vec<u8>, String> {
        let mut assembly = BlobAssembly::new(sha256, size_bytes).map_err(|e| e.to_string())?;
        while !assembly.is_complete() {
            let chunk = assembly.next_chunk();
            let request = PeerMessage::BlobRead {
                sha256: sha256.to_string(),
                chunk,
            };
            let answer = self
                .mesh
                .request(peer, &request, BLOB_CHUNK_TIMEOUT)
                .await
                .map_err(|error| error.to_string())?;
            match answer {
                PeerMessage::BlobChunk {
                    sha256: named,
                    chunk: index,
                    size_bytes: size,
                    bytes,
                } if named == sha256 && index == chunk && size == size_bytes => {
                    assembly.push(index, &bytes).map_err(|e| e.to_string())?;
                }
                PeerMessage::BlobMissing { why, .. } => return Err(why),
                _ => return Err(format!("an answer that is not chunk {chunk}")),
            }
        }
        assembly.finish().map_err(|error| error.to_string())
    }

    async fn store(&self, sha256: &str, bytes: Vec<u8>) -> Result<(), String> {
        let (blobs, name) = (self.blobs.clone(), sha256.to_string());
        tokio::task::spawn_blocking(move || {
            blobs.put(&name, &bytes, super::super::tenants::now_ms())
        })
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| error.to_string())
    }

    /// Answers a peer's read of one chunk (a peer the mesh let through: a voter or a member).
    pub(crate) fn serve_read(&self, sha256: &str, chunk: u32, responder: Responder<PeerMessage>) {
        let answer = match self.blobs.chunk(sha256, chunk) {
            Ok(Some((size_bytes, bytes))) => PeerMessage::BlobChunk {
                sha256: sha256.to_string(),
                chunk,
                size_bytes,
                bytes,
            },
            Ok(None) => missing(sha256, "not held here".to_string()),
            Err(error) => missing(sha256, error.to_string()),
        };
        // A full queue drops the answer: the reader times out and tries another peer.
        let _ = responder.reply(&answer);
    }

    /// A voter (or member) asked this node to hold `sha256`: fetch it from the asker, then
    /// answer.
    pub(crate) fn hold(
        self: &Arc<Self>,
        from: String,
        sha256: String,
        size_bytes: u64,
        responder: Responder<PeerMessage>,
    ) {
        let Ok(permit) = self.hold_permits.clone().try_acquire_owned() else {
            let busy = format!("{BLOB_HOLDS_MAX} holds are being served already");
            let _ = responder.reply(&missing(&sha256, busy));
            return;
        };
        let transfer = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let fetched = transfer
                .fetch_or_wait(&sha256, size_bytes, Some(&from))
                .await;
            let answer = match fetched {
                Ok(()) => PeerMessage::BlobHeld { sha256 },
                Err(why) => missing(&sha256, why),
            };
            let _ = responder.reply(&answer);
        });
    }

    fn in_flight_lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn missing(sha256: &str, why: String) -> PeerMessage {
    PeerMessage::BlobMissing {
        sha256: sha256.to_string(),
        why,
    }
}
