//! The simulated network: packets between replicas and clients with random delay (and thus
//! reordering), loss and duplication, and replica-to-replica links that can be cut in one or
//! both directions to model symmetric and asymmetric partitions.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::rng::SimRng;
use tessera_consensus::message::{ClientId, Message, ReplicaIndex, Reply};

/// Packets in flight at most; beyond this new packets are dropped, like a full socket buffer.
pub const NETWORK_PACKETS_MAX: usize = 200_000;

/// An endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Address {
    /// A replica.
    Replica(ReplicaIndex),
    /// A client.
    Client(ClientId),
}

/// What travels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// To a replica.
    Message(Message),
    /// To a client.
    Reply(Reply),
}

/// A packet due at `deliver_tick`.
#[derive(Debug)]
pub struct Packet {
    /// When it arrives.
    pub deliver_tick: u64,
    sequence: u64,
    /// The destination.
    pub to: Address,
    /// The contents.
    pub payload: Payload,
}

impl PartialEq for Packet {
    fn eq(&self, other: &Packet) -> bool {
        (self.deliver_tick, self.sequence) == (other.deliver_tick, other.sequence)
    }
}
impl Eq for Packet {}
impl PartialOrd for Packet {
    fn partial_cmp(&self, other: &Packet) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Packet {
    fn cmp(&self, other: &Packet) -> std::cmp::Ordering {
        (self.deliver_tick, self.sequence).cmp(&(other.deliver_tick, other.sequence))
    }
}

/// Fault rates of the network, in per mille per packet.
#[derive(Clone, Copy, Debug)]
pub struct NetworkFaults {
    /// Chance a packet is lost.
    pub loss_per_mille: u64,
    /// Chance a packet is delivered twice.
    pub duplicate_per_mille: u64,
    /// Largest delay; each packet takes `1..=delay_ticks_max` ticks.
    pub delay_ticks_max: u64,
    /// Chance a state-transfer chunk arrives with one byte of its state flipped (other
    /// messages are covered by entry checksums; this one tests the checkpoint checksum).
    pub corrupt_state_chunk_per_mille: u64,
}

/// The network between `replica_count` replicas and any number of clients.
#[derive(Debug)]
pub struct Network {
    in_flight: BinaryHeap<Reverse<Packet>>,
    sequence: u64,
    replica_count: usize,
    /// `link_up[from][to]` for replica-to-replica links.
    link_up: Vec<Vec<bool>>,
    /// The current fault rates.
    pub faults: NetworkFaults,
    /// Packets dropped by loss, partitions or the in-flight bound.
    pub packets_dropped: u64,
}

impl Network {
    /// A fully connected network.
    pub fn new(replica_count: usize, faults: NetworkFaults) -> Network {
        Network {
            in_flight: BinaryHeap::new(),
            sequence: 0,
            replica_count,
            link_up: vec![vec![true; replica_count]; replica_count],
            faults,
            packets_dropped: 0,
        }
    }

    /// Queues a packet, applying loss, duplication, delay and partitions.
    pub fn send(
        &mut self,
        rng: &mut SimRng,
        now_tick: u64,
        from: Address,
        to: Address,
        payload: Payload,
    ) {
        if !self.is_link_up(from, to) || rng.per_mille(self.faults.loss_per_mille) {
            self.packets_dropped += 1;
            return;
        }
        if rng.per_mille(self.faults.duplicate_per_mille) {
            self.enqueue(rng, now_tick, to, payload.clone());
        }
        let mut payload = payload;
        if let Payload::Message(
            Message::StateChunk { bytes, .. } | Message::ImagePart { bytes, .. },
        ) = &mut payload
            && !bytes.is_empty()
            && rng.per_mille(self.faults.corrupt_state_chunk_per_mille)
        {
            let index = rng.below(bytes.len() as u64) as usize;
            bytes[index] ^= 1 << rng.below(8);
        }
        self.enqueue(rng, now_tick, to, payload);
    }

    fn enqueue(&mut self, rng: &mut SimRng, now_tick: u64, to: Address, payload: Payload) {
        if self.in_flight.len() >= NETWORK_PACKETS_MAX {
            self.packets_dropped += 1;
            return;
        }
        let deliver_tick = now_tick + rng.between(1, self.faults.delay_ticks_max.max(1));
        self.sequence += 1;
        let packet = Packet {
            deliver_tick,
            sequence: self.sequence,
            to,
            payload,
        };
        self.in_flight.push(Reverse(packet));
    }

    /// The next packet due at or before `now_tick`, if any.
    pub fn pop_due(&mut self, now_tick: u64) -> Option<Packet> {
        if self
            .in_flight
            .peek()
            .is_some_and(|Reverse(packet)| packet.deliver_tick <= now_tick)
        {
            self.in_flight.pop().map(|Reverse(packet)| packet)
        } else {
            None
        }
    }

    fn is_link_up(&self, from: Address, to: Address) -> bool {
        match (from, to) {
            (Address::Replica(from), Address::Replica(to)) => {
                self.link_up[usize::from(from)][usize::from(to)]
            }
            _ => true,
        }
    }

    /// Restores every link.
    pub fn heal(&mut self) {
        self.link_up.iter_mut().flatten().for_each(|up| *up = true);
    }

    /// Cuts every link between `side` and the rest, both ways.
    pub fn partition_symmetric(&mut self, side: &[bool]) {
        self.heal();
        for from in 0..self.replica_count {
            for to in 0..self.replica_count {
                if side[from] != side[to] {
                    self.link_up[from][to] = false;
                }
            }
        }
    }

    /// Cuts each one-way link with probability `per_mille`.
    pub fn partition_asymmetric(&mut self, rng: &mut SimRng, per_mille: u64) {
        self.heal();
        for from in 0..self.replica_count {
            for to in 0..self.replica_count {
                if from != to && rng.per_mille(per_mille) {
                    self.link_up[from][to] = false;
                }
            }
        }
    }

    /// Cuts one replica off from every other replica, both ways.
    pub fn isolate(&mut self, replica: usize) {
        let side: Vec<bool> = (0..self.replica_count)
            .map(|index| index == replica)
            .collect();
        self.partition_symmetric(&side);
    }
}
