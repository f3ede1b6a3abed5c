-- Ephemeral queues' declarations from psql: queen.ephemeral_configure_v1 stores the
-- effective options (defaults filled in) and refuses a bad knob by name,
-- queen.ephemeral_declared_v1 is what a broker loads at start, queen.ephemeral_delete_v1
-- forgets. The contents never reach the database. Each "-- ephemeral::NAME" comment
-- names one check.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;

-- ephemeral::configure_fills_the_defaults: absent knobs take their defaults, stored whole.
SELECT c->'created' AS created, c->'options' AS options
  FROM queen.ephemeral_configure_v1('presence', '{"maxLength": 500, "policy": "drop_oldest"}') c;

-- ephemeral::reconfigure_replaces: a second declaration replaces the options, created false.
SELECT c->'created' AS created, c->'options'->'maxLength' AS max_length,
       c->'options'->'windowBuffer' AS window_buffer
  FROM queen.ephemeral_configure_v1('presence', '{"windowBuffer": {"ms": 20, "count": 8}}') c;

-- ephemeral::bad_options_refused_by_name: 22023 naming the knob, nothing stored.
SELECT queen.ephemeral_configure_v1('typo', '{"ttl_second": 5}');
SELECT queen.ephemeral_configure_v1('typo', '{"leaseSeconds": 0}');
SELECT queen.ephemeral_configure_v1('typo', '{"policy": "drop"}');
SELECT queen.ephemeral_configure_v1('typo', '[]');
SELECT queen.ephemeral_configure_v1('', '{}');
SELECT queen.ephemeral_configure_v1(NULL, '{}');

-- ephemeral::declared_by_tenant: every tenant's declarations, in order.
SELECT queen.ephemeral_configure_v1('presence', '{}', '00000000-0000-0000-0000-0000000000aa')->'created' AS other_tenant;
SELECT d->>'tenant' AS tenant, d->>'queue' AS queue, d->'options'->>'policy' AS policy
  FROM jsonb_array_elements(queen.ephemeral_declared_v1()) d;

-- ephemeral::delete_once: true the first time, false after; the other tenant's stays.
SELECT queen.ephemeral_delete_v1('presence') AS deleted, queen.ephemeral_delete_v1('presence') AS again;
SELECT jsonb_array_length(queen.ephemeral_declared_v1()) AS left_over;
