//! The name rule (queen_log::names) on the SQL side: the same names the broker refuses
//! with 400 are refused here with 22023, wherever a name is stored or leased by (push
//! creating a queue or partition, a pop creating a cursor, configure). Lookups by a
//! longer name simply find nothing.

use pgrx::prelude::*;
use queen_log::names::{check_name, NameKind};

use crate::db::bad_param;

/// Raises 22023 with the rule's text when `name` is not a valid name of `kind`.
pub fn check(kind: NameKind, name: &str) {
    if let Err(e) = check_name(kind, name) {
        bad_param(e.to_string());
    }
}

/// `queen.check_name_v1(kind, name)`: the rule for SQL callers (configure_queue_v1);
/// `kind` is `queue`, `partition` or `consumer group`. Returns the name.
#[pg_extern(immutable, parallel_safe)]
#[search_path(pg_catalog, pg_temp)]
fn check_name_v1(p_kind: &str, p_name: &str) -> String {
    let kind = match p_kind {
        "queue" => NameKind::Queue,
        "partition" => NameKind::Partition,
        "consumer group" => NameKind::ConsumerGroup,
        other => bad_param(format!(
            "p_kind must be 'queue', 'partition' or 'consumer group', got {other:?}"
        )),
    };
    check(kind, p_name);
    p_name.to_string()
}
