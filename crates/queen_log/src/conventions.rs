//! The contract's conventions (docs/contract.md, conventions): the queue-mode consumer
//! group, the default tenant and how a pop's lease time is chosen. One definition, read
//! by the extension (its Rust and, through `queen.effective_lease_time`, its SQL) and
//! by the broker, so the three cannot drift apart.

use uuid::Uuid;

/// The consumer group of a pop without a group ("queue mode").
pub const QUEUE_MODE: &str = "__QUEUE_MODE__";

/// The tenant of every call that names none (and of every request while tenancy is off).
/// SQL's one spelling of it is `queen.default_tenant()` (sql/bootstrap.sql), which every
/// SQL default calls; a #[pg_test] checks the two agree.
pub const DEFAULT_TENANT: Uuid = Uuid::from_u128(1);

/// A queue's lease time when its row has none (`queues.lease_time` NULL).
pub const DEFAULT_LEASE_SECONDS: i32 = 60;

/// The lease a pop of the queue grants when the caller asks for none: the queue's
/// `lease_time`, [`DEFAULT_LEASE_SECONDS`] when NULL, and at least 1 second (a zero or
/// negative configured lease would grant a lease that is over before it is granted).
pub fn queue_lease_time(lease_time: Option<i32>) -> i32 {
    lease_time.unwrap_or(DEFAULT_LEASE_SECONDS).max(1)
}

/// The lease a caller asked for, when it asked for one: only a positive number of seconds
/// is a request (docs/broker-contract.md §1: `leaseSeconds` absent, 0 or negative means the queue's).
pub fn requested_lease(seconds: Option<i32>) -> Option<i32> {
    seconds.filter(|s| *s > 0)
}

/// The lease of a broker pop: the positive one asked for, else the queue's
/// ([`queue_lease_time`]).
pub fn pop_lease(requested: Option<i32>, queue_lease: i32) -> i32 {
    requested_lease(requested).unwrap_or(queue_lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_tenant_is_spelled_as_the_contract_says() {
        // docs/contract.md, conventions.
        assert_eq!(
            DEFAULT_TENANT.to_string(),
            "00000000-0000-0000-0000-000000000001"
        );
    }

    #[test]
    fn queue_lease_time_defaults_null_and_floors_at_one() {
        assert_eq!(queue_lease_time(None), 60);
        assert_eq!(queue_lease_time(Some(0)), 1);
        assert_eq!(queue_lease_time(Some(-5)), 1);
        assert_eq!(queue_lease_time(Some(i32::MIN)), 1);
        assert_eq!(queue_lease_time(Some(1)), 1);
        assert_eq!(queue_lease_time(Some(300)), 300);
    }

    #[test]
    fn only_a_positive_lease_is_a_request() {
        assert_eq!(requested_lease(None), None);
        assert_eq!(requested_lease(Some(0)), None);
        assert_eq!(requested_lease(Some(-1)), None);
        assert_eq!(requested_lease(Some(7)), Some(7));
        assert_eq!(pop_lease(Some(0), 30), 30);
        assert_eq!(pop_lease(None, 30), 30);
        assert_eq!(pop_lease(Some(5), 30), 5);
    }
}
