//! The simulated moves: the next epoch placed on a set with one replica replaced, and its
//! fillers — the replica of both epochs that leads the move, and a standby of both epochs that
//! steps in when the leader is down (or fills at once beside it) — each sealing the old group
//! through its own replica, taking its image once that replica applied the seal, and filling
//! and opening the new group piece by piece, as `tessera-host`'s partition moves do.

use super::{FILLER_CLIENTS, Group, MoveCanary, MoveSummary, NODES, Run};
use tessera_consensus::message::{ClientId, checksum_bytes};
use tessera_state::partition::{FILL_BYTES_MAX, PartitionOp, PartitionResult};

/// The standby's turns before it seals and fills itself when the leader is down.
const STANDBY_TURNS: u64 = 40;
/// Per thousand moves: the leader is down (it never acts), so the standby fills.
const LEADER_DOWN_PER_MILLE: u64 = 200;
/// Per thousand moves: the standby fills at once beside the leader.
const BOTH_FILL_PER_MILLE: u64 = 300;
/// The bytes of a simulated fill piece: small, so an image takes many.
const PIECE_BYTES: usize = FILL_BYTES_MAX / 64;

/// A move under way: its fillers.
pub(super) struct Move {
    fillers: Vec<Filler>,
}

struct Filler {
    node: usize,
    stage: Stage,
}

/// Where a filler is.
enum Stage {
    /// Starts after this many more of its turns.
    Waiting(u64),
    /// Down: never acts.
    Down,
    /// Submitted the seal at this index of the old log (with the canary, the image taken then).
    Sealing {
        index: usize,
        early: Option<Vec<u8>>,
    },
    /// Submitting the image's pieces; `at`, the last one submitted, if not yet answered.
    Filling {
        image: Vec<u8>,
        next: usize,
        at: Option<usize>,
    },
    /// Submitted the open at this index of the new log.
    Opening { index: usize },
    /// The new group is open (by this filler or another).
    Done,
}

impl Run {
    pub(super) fn advance_move(
        &mut self,
        summary: &mut MoveSummary,
        asking: bool,
    ) -> Result<(), String> {
        let Some(moving) = &self.moving else {
            if asking && self.rng.per_mille(super::MOVE_PER_MILLE * 10) {
                return self.start_move();
            }
            return Ok(());
        };
        let which = self.rng.index(moving.fillers.len());
        self.advance_filler(which)?;
        let Some(moving) = &self.moving else {
            return Ok(());
        };
        let finished = moving
            .fillers
            .iter()
            .all(|filler| matches!(filler.stage, Stage::Done | Stage::Down));
        let opened = moving
            .fillers
            .iter()
            .any(|filler| matches!(filler.stage, Stage::Done));
        if finished && opened {
            summary.moves += 1;
            self.moving = None;
        }
        Ok(())
    }

    fn advance_filler(&mut self, which: usize) -> Result<(), String> {
        let new = self.groups.len() - 1;
        let old = new - 1;
        let Some(moving) = self.moving.as_mut() else {
            return Ok(());
        };
        let node = moving.fillers[which].node;
        let session = FILLER_CLIENTS + node as ClientId;
        let stage = std::mem::replace(&mut moving.fillers[which].stage, Stage::Done);
        let next = match stage {
            Stage::Down => Stage::Down,
            Stage::Done => Stage::Done,
            Stage::Waiting(turns) if turns > 0 => Stage::Waiting(turns - 1),
            Stage::Waiting(_) => {
                let early = match self.canary {
                    MoveCanary::ImageBeforeSeal => Some(self.fill_stream(old, node)?),
                    _ => None,
                };
                let index = self.submit(old, session, PartitionOp::Seal.encode());
                Stage::Sealing { index, early }
            }
            Stage::Sealing { index, early } => match self.answer(node, (old, index)) {
                None => Stage::Sealing { index, early },
                Some((_, PartitionResult::Applied { .. })) => Stage::Filling {
                    image: match early {
                        Some(image) => image,
                        None => self.fill_stream(old, node)?,
                    },
                    next: 0,
                    at: None,
                },
                Some((_, other)) => return Err(format!("epoch {old}'s seal answered {other:?}")),
            },
            Stage::Filling { image, next, at } => {
                self.fill_step(node, session, new, image, next, at)?
            }
            Stage::Opening { index } => match self.answer(node, (new, index)) {
                None => Stage::Opening { index },
                Some((_, PartitionResult::Applied { .. })) => Stage::Done,
                // Its pieces were not all there: fill again.
                Some((_, PartitionResult::Filling)) => Stage::Filling {
                    image: self.fill_stream(old, node)?,
                    next: 0,
                    at: None,
                },
                Some((_, other)) => return Err(format!("epoch {new}'s open answered {other:?}")),
            },
        };
        if let Some(moving) = self.moving.as_mut() {
            moving.fillers[which].stage = next;
        }
        Ok(())
    }

    /// One step of filling: wait for the last piece's answer, then submit the next, or the
    /// open after the last.
    fn fill_step(
        &mut self,
        node: usize,
        session: ClientId,
        new: usize,
        image: Vec<u8>,
        next: usize,
        at: Option<usize>,
    ) -> Result<Stage, String> {
        if let Some(index) = at {
            match self.answer(node, (new, index)) {
                None => return Ok(Stage::Filling { image, next, at }),
                Some((_, PartitionResult::Applied { .. })) => {}
                Some((_, PartitionResult::Opened)) => return Ok(Stage::Done),
                Some((_, other)) => {
                    return Err(format!("a fill of epoch {new} answered {other:?}"));
                }
            }
        }
        let checksum = checksum_bytes(&image);
        let pieces: Vec<&[u8]> = image.chunks(PIECE_BYTES).collect();
        let Some(piece) = pieces.get(next) else {
            let open = PartitionOp::Open {
                checksum,
                pieces: pieces.len() as u32,
            };
            let index = self.submit(new, session, open.encode());
            return Ok(Stage::Opening { index });
        };
        let fill = PartitionOp::Fill {
            checksum,
            index: next as u32,
            bytes: piece.to_vec(),
        };
        let index = self.submit(new, session, fill.encode());
        Ok(Stage::Filling {
            image,
            next: next + 1,
            at: Some(index),
        })
    }

    /// Places the next epoch: one replica of the newest group replaced by a node outside it;
    /// the two that stay fill it (the leader at once; the standby if the leader is down, or
    /// now and then beside it).
    fn start_move(&mut self) -> Result<(), String> {
        let old = self.groups.len() - 1;
        let members = self.groups[old].nodes().to_vec();
        let outside: Vec<usize> = (0..NODES).filter(|node| !members.contains(node)).collect();
        let leaving = members[self.rng.index(members.len())];
        let joining = outside[self.rng.index(outside.len())];
        let mut nodes: Vec<usize> = members
            .iter()
            .copied()
            .filter(|node| *node != leaving)
            .chain([joining])
            .collect();
        nodes.sort_unstable();
        let next = Group::start(nodes, true, self.canary.consensus(), &mut self.rng)?;
        self.groups.push(next);
        let staying: Vec<usize> = members
            .iter()
            .copied()
            .filter(|node| *node != leaving)
            .collect();
        let (leader, standby) = (staying[0], staying[1]);
        let draw = self.rng.below(1_000);
        let (leader_stage, standby_stage) = if draw < LEADER_DOWN_PER_MILLE {
            (Stage::Down, Some(Stage::Waiting(STANDBY_TURNS)))
        } else if draw < LEADER_DOWN_PER_MILLE + BOTH_FILL_PER_MILLE {
            (Stage::Waiting(0), Some(Stage::Waiting(self.rng.below(5))))
        } else {
            (Stage::Waiting(0), None)
        };
        let mut fillers = vec![Filler {
            node: leader,
            stage: leader_stage,
        }];
        if let Some(stage) = standby_stage {
            fillers.push(Filler {
                node: standby,
                stage,
            });
        }
        self.moving = Some(Move { fillers });
        Ok(())
    }
}
