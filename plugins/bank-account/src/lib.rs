//! A bank account. Balances are `u64` (whole units, never negative).
//!
//! - `{"Deposit": n}` adds `n`; replies with the balance (rejected if it would overflow).
//! - `{"Withdraw": n}` subtracts `n`; replies with the balance, or is rejected when `n` exceeds
//!   it (state unchanged).
//! - `"Balance"` replies with the balance.
//! - `{"Transfer": {"to": "<account id>", "amount": n}}` withdraws `n` and `ask`s the account
//!   `to` — an entity of this same type, whatever name the type was deployed under — to
//!   `{"Deposit": n}`. The withdrawal is committed only if that deposit succeeded: when the ask
//!   fails its error is returned, so the host discards the withdrawal. Replies with this
//!   account's balance. A transfer to itself, or beyond the balance, is rejected before asking.
//!
//! The balance lives in durable state under the key `"balance"`.

use tessera_sdk::prelude::*;

/// The state key holding the balance (a `u64`; absent means 0).
pub const BALANCE_KEY: &str = "balance";

/// How long a transfer waits for the target account's deposit. Two accounts transferring to
/// each other at once wait on each other; this bound turns that into two failed transfers.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(5);

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
        ctx.put(BALANCE_KEY, &balance);
        let target = Address::new(me.entity_type, to);
        let _target_balance: u64 = ctx.ask(&target, &Msg::Deposit(amount), TRANSFER_TIMEOUT)?;
        Ok(balance)
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
            Msg::Deposit(amount) => self.after_deposit(amount)?,
            Msg::Withdraw(amount) => self.after_withdrawal(amount)?,
            Msg::Transfer { to, amount } => self.transfer(ctx, to, amount)?,
        };
        ctx.put(BALANCE_KEY, &balance);
        self.balance = balance;
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
    fn transfer_asks_the_same_type_and_commits_on_success() {
        let mut alice = account("alice", 100);
        let bob = Address::new("accounts", "bob");
        alice.on_ask(bob.clone(), |msg: Msg| match msg {
            Msg::Deposit(amount) => Ok(500 + amount),
            other => Err(Error::bad_message(format!("unexpected {other:?}"))),
        });
        let transfer = Msg::Transfer {
            to: "bob".into(),
            amount: 40,
        };
        assert_eq!(alice.send(&transfer), Ok(60));
        assert_eq!(alice.state::<u64>(BALANCE_KEY), Some(60));
        let asks = alice.asks();
        assert_eq!(asks.len(), 1);
        assert_eq!(asks[0].to, bob);
        assert_eq!(asks[0].timeout, TRANSFER_TIMEOUT);
        assert!(matches!(asks[0].decode::<Msg>(), Ok(Msg::Deposit(40))));
    }

    #[test]
    fn failed_ask_leaves_the_balance_unchanged() {
        let mut alice = account("alice", 100);
        alice.on_ask(
            Address::new("accounts", "bob"),
            |_: Msg| -> Result<u64, Error> { Err(Error::failed("deadline exceeded")) },
        );
        let transfer = Msg::Transfer {
            to: "bob".into(),
            amount: 40,
        };
        assert_eq!(
            alice.send(&transfer),
            Err(Error::failed("deadline exceeded"))
        );
        assert_eq!(alice.state::<u64>(BALANCE_KEY), Some(100));
        assert_eq!(alice.send("Balance"), Ok(100));
    }

    #[test]
    fn insufficient_funds_are_rejected_before_asking() {
        let mut alice = account("alice", 10);
        let transfer = Msg::Transfer {
            to: "bob".into(),
            amount: 40,
        };
        assert!(matches!(alice.send(&transfer), Err(Error::Rejected(_))));
        assert!(alice.asks().is_empty());
    }

    #[test]
    fn transfer_to_self_is_rejected() {
        let mut alice = account("alice", 10);
        let transfer = Msg::Transfer {
            to: "alice".into(),
            amount: 1,
        };
        assert!(matches!(alice.send(&transfer), Err(Error::Rejected(_))));
        assert!(alice.asks().is_empty());
        assert_eq!(alice.state::<u64>(BALANCE_KEY), Some(10));
    }
}
