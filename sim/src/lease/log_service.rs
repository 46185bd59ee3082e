//! The log's side of the wire: commands that arrive from nodes commit in arrival order (if a
//! majority of voters is reachable at all), and the answer goes back over the network. A
//! settled move or install is announced by the coordinator instance, when one is running.

use super::coordinator::announce;
use super::message::{Endpoint, Message};
use super::table::{MemberId, Start};
use super::world::World;

impl World {
    /// A command arrives at the log from `from`.
    pub(super) fn at_log(&mut self, from: Endpoint, message: Message) {
        if !self.topology.log_available() {
            return;
        }
        let mut sends = Vec::new();
        match message {
            Message::Renew {
                member,
                boot,
                renewal,
            } => {
                let answer = match self.log.renew(member) {
                    Ok(status) => {
                        self.report.renewals += 1;
                        Message::RenewOk {
                            member,
                            boot,
                            renewal,
                            status,
                        }
                    }
                    Err(refusal) => {
                        self.report.renewals_refused += 1;
                        Message::Refused {
                            member,
                            boot,
                            refusal,
                        }
                    }
                };
                sends.push((from, answer));
            }
            Message::Join { member, boot } => {
                let new = self.log.status(member).is_none();
                let answer = match self.log.join(member) {
                    Ok(_) => {
                        self.report.joins += u64::from(new && self.real_ms > 0);
                        Message::JoinOk { member, boot }
                    }
                    Err(refusal) => Message::Refused {
                        member,
                        boot,
                        refusal,
                    },
                };
                sends.push((from, answer));
            }
            Message::FetchTable => sends.push((
                from,
                Message::TableUpdate {
                    table: self.log.table().clone(),
                },
            )),
            Message::Leave { member, boot } => {
                if let Err(refusal) = self.log.leave(member) {
                    sends.push((
                        from,
                        Message::Refused {
                            member,
                            boot,
                            refusal,
                        },
                    ));
                }
            }
            Message::Installed {
                member,
                shard,
                generation,
            } => {
                let owns =
                    self.entry_matches(shard, generation, |entry_owner, _| entry_owner == member);
                if owns && self.log.settle(shard, generation) {
                    self.announce_settled(&mut sends);
                }
            }
            Message::HandOffDone {
                member,
                shard,
                generation,
            } => {
                let handed = self.entry_matches(shard, generation, |_, start| {
                    start == Start::HandOff { from: member }
                });
                if handed && self.log.settle(shard, generation) {
                    self.announce_settled(&mut sends);
                }
            }
            _ => {}
        }
        self.route(Endpoint::Log, sends);
    }

    fn entry_matches(
        &self,
        shard: usize,
        generation: u64,
        test: impl Fn(MemberId, Start) -> bool,
    ) -> bool {
        self.log
            .table()
            .entries
            .get(shard)
            .is_some_and(|entry| entry.generation == generation && test(entry.owner, entry.start))
    }

    fn announce_settled(&self, sends: &mut Vec<(Endpoint, Message)>) {
        if self.coordinator.is_some() {
            announce(&self.log, sends);
        }
    }
}
