//! A bank account. Balances are `u64` (whole units, never negative).
//!
//! - `{"Deposit": n}` adds `n`; replies with the balance (rejected if it would overflow).
//! - `{"Withdraw": n}` subtracts `n`; replies with the balance, or is rejected when `n` exceeds
//!   it (state unchanged).
//! - `"Balance"` replies with the balance.
//! - `{"Transfer": {"to": "<account id>", "amount": n}}` withdraws `n` and, in the same commit,
//!   queues a `{"Credit": {"from": <this id>, "amount": n}}` tell to the account `to` (an entity
//!   of this same type, whatever name the type was deployed under). Replies with this account's
//!   balance. A transfer to itself, or beyond the balance, is rejected and changes nothing.
//! - `{"Credit": {"from": id, "amount": n}}` (sent by a transfer) adds `n`. If it cannot (the
//!   balance would overflow) it tells `from` `{"Refund": {"from": <this id>, "amount": n}}`
//!   instead, so the money goes back rather than vanishing.
//! - `{"Refund": {"from": id, "amount": n}}` adds back a transfer the receiver could not take.
//!
//! This is the safe pattern for effects across entities: the host commits a message's tells
//! with its writes and delivers each one effectively once (retried until the receiver commits
//! it, duplicates dropped), so the withdrawal and the credit cannot come apart — no money is
//! created or lost, whatever crashes, timeouts or concurrent transfers happen. An `ask` would
//! not give that: its reply is not atomic with the asker's writes.
//!
//! The balance lives in durable state under the key `"balance"`.

use tessera_sdk::prelude::*;

/// The state key holding the balance (a `u64`; absent means 0).
pub const BALANCE_KEY: &str = "balance";

/// The in-memory copy of the account, rebuilt from state on activation.
pub struct Account {
    balance: u64,
}

/// What an account understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Adds to the balance.
    Deposit(u64),
    /// Takes from the balance, if there is enough.
    Withdraw(u64),
    /// Replies with the balance.
    Balance,
    /// Moves `amount` to the account with id `to`.
    Transfer {
        /// The id of the receiving account (same entity type).
        to: String,
        /// How much to move.
        amount: u64,
    },
    /// The receiving half of a transfer.
    Credit {
        /// The id of the paying account.
        from: String,
        /// How much it paid.
        amount: u64,
    },
    /// A transfer the receiver could not take, coming back.
    Refund {
        /// The id of the account that refused it.
        from: String,
        /// How much comes back.
        amount: u64,
    },
}

impl Account {
    fn after_deposit(&self, amount: u64) -> Result<u64, Error> {
        self.balance.checked_add(amount).ok_or_else(|| {
            Error::rejected(format!("a deposit of {amount} would overflow the balance"))
        })
    }

    fn after_withdrawal(&self, amount: u64) -> Result<u64, Error> {
        self.balance.checked_sub(amount).ok_or_else(|| {
            Error::rejected(format!(
                "insufficient funds: balance {}, requested {amount}",
                self.balance
            ))
        })
    }

    fn transfer(&self, ctx: &mut Ctx, to: String, amount: u64) -> Result<u64, Error> {
        let me = ctx.self_address();
        if to == me.id {
            return Err(Error::rejected("cannot transfer to the same account"));
        }
        let balance = self.after_withdrawal(amount)?;
        let target = Address::new(me.entity_type, to);
        ctx.tell(&target, &Msg::Credit { from: me.id, amount })?;
        Ok(balance)
    }

    fn credit(&self, ctx: &mut Ctx, from: String, amount: u64) -> Result<u64, Error> {
        match self.after_deposit(amount) {
            Ok(balance) => Ok(balance),
            Err(_) => {
                let me = ctx.self_address();
                let payer = Address::new(me.entity_type, from);
                ctx.tell(&payer, &Msg::Refund { from: me.id, amount })?;
                Ok(self.balance)
            }
        }
    }
}

impl Entity for Account {
    type Msg = Msg;
    type Reply = u64;

    fn activate(ctx: &mut Ctx, _: Activation) -> Self {
        Account {
            balance: ctx.get(BALANCE_KEY).unwrap_or(0),
        }
    }

    fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<u64, Error> {
        let balance = match msg {
            Msg::Balance => return Ok(self.balance),
            Msg::Deposit(amount) | Msg::Refund { amount, .. } => self.after_deposit(amount)?,
            Msg::Withdraw(amount) => self.after_withdrawal(amount)?,
            Msg::Transfer { to, amount } => self.transfer(ctx, to, amount)?,
            Msg::Credit { from, amount } => self.credit(ctx, from, amount)?,
        };
        if balance != self.balance {
            ctx.put(BALANCE_KEY, &balance);
            self.balance = balance;
        }
        Ok(balance)
    }
}

export_entity!(Account);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    fn account(id: &str, balance: u64) -> Harness<Account> {
        let account = Harness::new(Address::new("accounts", id));
        if balance > 0 {
            account.set_state(BALANCE_KEY, &balance);
        }
        account
    }

    #[test]
    fn deposit_withdraw_balance() {
        let mut alice = account("alice", 0);
        assert_eq!(alice.send(&Msg::Deposit(100)), Ok(100));
        assert_eq!(alice.send(&Msg::Withdraw(30)), Ok(70));
        assert_eq!(alice.send("Balance"), Ok(70));
        assert_eq!(alice.state::<u64>(BALANCE_KEY), Some(70));
    }

    #[test]
    fn overdraft_is_rejected_and_state_unchanged() {
        let mut alice = account("alice", 10);
        assert!(matches!(
            alice.send(&Msg::Withdraw(11)),
            Err(Error::Rejected(_))
        ));
        assert_eq!(alice.state::<u64>(BALANCE_KEY), Some(10));
        assert_eq!(alice.send("Balance"), Ok(10));
    }

    #[test]
    fn transfer_withdraws_and_queues_a_credit_to_the_same_type() {
        let mut alice = account("alice", 100);
        let transfer = Msg::Transfer {
            to: "bob".into(),
            amount: 40,
        };
        assert_eq!(alice.send(&transfer), Ok(60));
        assert_eq!(alice.state::<u64>(BALANCE_KEY), Some(60));
        let tells = alice.tells();
        assert_eq!(tells.len(), 1);
        assert_eq!(tells[0].to, Address::new("accounts", "bob"));
        assert!(matches!(
            tells[0].decode::<Msg>(),
            Ok(Msg::Credit { from, amount: 40 }) if from == "alice"
        ));
        assert!(alice.asks().is_empty(), "a transfer never waits on the receiver");
    }

    #[test]
    fn a_credit_adds_to_the_balance() {
        let mut bob = account("bob", 5);
        let credit = Msg::Credit {
            from: "alice".into(),
            amount: 40,
        };
        assert_eq!(bob.send(&credit), Ok(45));
        assert_eq!(bob.state::<u64>(BALANCE_KEY), Some(45));
        assert!(bob.tells().is_empty());
    }

    #[test]
    fn a_credit_that_cannot_be_taken_is_refunded() {
        let mut bob = account("bob", u64::MAX - 1);
        let credit = Msg::Credit {
            from: "alice".into(),
            amount: 40,
        };
        assert_eq!(bob.send(&credit), Ok(u64::MAX - 1));
        assert_eq!(bob.state::<u64>(BALANCE_KEY), Some(u64::MAX - 1));
        let tells = bob.tells();
        assert_eq!(tells.len(), 1);
        assert_eq!(tells[0].to, Address::new("accounts", "alice"));
        assert!(matches!(
            tells[0].decode::<Msg>(),
            Ok(Msg::Refund { from, amount: 40 }) if from == "bob"
        ));
        let mut alice = account("alice", 60);
        let refund = Msg::Refund {
            from: "bob".into(),
            amount: 40,
        };
        assert_eq!(alice.send(&refund), Ok(100));
    }

    #[test]
    fn insufficient_funds_are_rejected_and_nothing_is_sent() {
        let mut alice = account("alice", 10);
        let transfer = Msg::Transfer {
            to: "bob".into(),
            amount: 40,
        };
        assert!(matches!(alice.send(&transfer), Err(Error::Rejected(_))));
        assert!(alice.tells().is_empty());
    }

    #[test]
    fn transfer_to_self_is_rejected() {
        let mut alice = account("alice", 10);
        let transfer = Msg::Transfer {
            to: "alice".into(),
            amount: 1,
        };
        assert!(matches!(alice.send(&transfer), Err(Error::Rejected(_))));
        assert!(alice.tells().is_empty());
        assert_eq!(alice.state::<u64>(BALANCE_KEY), Some(10));
    }
}
