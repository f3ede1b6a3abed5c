//! Ephemeral queues' declarations (docs/decisions.md, "Ephemeral queues"): the contents
//! live in the owning broker's memory and never here; what is durable is the declared
//! options, one row per (tenant, queue) of `queen.ephemeral_queues`, so a queue comes
//! back after a restart as configured and empty. The options are read by the same rule
//! the broker enforces (`queen_log::ephemeral::Options`): a bound this function stores is
//! one the broker can hold. The delete and the broker's load are in sql/ephemeral.sql.

use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::JsonB;
use queen_log::ephemeral::Options;
use queen_log::names::NameKind;
use queen_log::wire::EphemeralConfigured;
use serde_json::json;

use crate::db::{bad_param, col, default_tenant, jsonb, q, required, OrRaise};

/// `queen.ephemeral_configure_v1(queue, options, tenant)`: declares (or redeclares) an
/// ephemeral queue. Every knob absent from `options` takes its default, so the stored
/// options are the effective ones; an unknown knob or one out of range raises 22023
/// naming it (`options.maxBytes: ...`) and stores nothing. Answers
/// `{queue, options, created}`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn ephemeral_configure_v1(
    p_queue: Option<&str>,
    p_options: default!(Option<JsonB>, "'{}'"),
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let queue = required(p_queue, "p_queue");
    crate::names::check(NameKind::Queue, queue);
    let given = p_options.map_or(json!({}), |o| o.0);
    let options = Options::from_wire(&given).unwrap_or_else(|e| bad_param(e.to_string()));
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    let wire = options.to_wire();
    let created: bool = Spi::connect(|c| {
        let row = q(
            c,
            "INSERT INTO queen.ephemeral_queues AS e (tenant_id, name, options)
             VALUES ($1, $2, $3)
             ON CONFLICT (tenant_id, name)
             DO UPDATE SET options = EXCLUDED.options, updated_at = clock_timestamp()
             RETURNING (e.xmax = 0)",
            &[tenant.into(), queue.into(), jsonb(&wire).into()],
        )
        .or_raise()
        .next()
        .expect("INSERT ... RETURNING answers a row");
        col(&row, 1, "created")
    });
    jsonb(&EphemeralConfigured {
        queue: queue.to_string(),
        options: wire,
        created,
    })
}
