-- Queen 2.x's key/value and locks from psql: queen.kv_apply_v1, queen.locks_apply_v1
-- (docs/decisions.md, "Key/value", "Locks").
-- Versions and instants differ per run: the checks show verdicts, values and
-- comparisons. Each "-- kv::NAME" comment names one check. A fresh empty database.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;
CREATE FUNCTION kv(ops text) RETURNS SETOF jsonb LANGUAGE sql AS
$$ SELECT CASE WHEN r ? 'rows'
               THEN jsonb_set(r, '{rows}', (SELECT COALESCE(jsonb_agg(x - 'version' - 'expiresAt' - 'updatedAt'), '[]')
                                              FROM jsonb_array_elements(r->'rows') x))
               ELSE r - 'version' - 'expiresAt' - 'updatedAt' END
     FROM jsonb_array_elements(queen.kv_apply_v1(ops::jsonb)->'results') r $$;

-- kv::put_then_get: the value round-trips, a null is a value, a miss is found: false.
SELECT * FROM kv('[{"op":"put","ns":"app","key":"a","value":{"n":1},"ttlSeconds":60},
                   {"op":"put","ns":"app","key":"nil","value":null,"forever":true},
                   {"op":"get","ns":"app","key":"a"},{"op":"get","ns":"app","key":"nil"},
                   {"op":"get","ns":"app","key":"never"}]');

-- kv::put_if_absent_and_expect: exists, absent (creates nothing), version.
SELECT * FROM kv('[{"op":"putIfAbsent","ns":"app","key":"a","value":2,"ttlSeconds":60},
                   {"op":"put","ns":"app","key":"fence","value":1,"ttlSeconds":60,"expect":42},
                   {"op":"get","ns":"app","key":"fence"},
                   {"op":"put","ns":"app","key":"a","value":3,"ttlSeconds":60,"expect":1}]');
SELECT (r->0->>'version')::bigint < (r->1->>'version')::bigint AS versions_grow,
       r->2->>'applied' AS check_of_the_replaced_version, r->3->>'reason' AS check_of_version_1
  FROM (SELECT queen.kv_apply_v1(format('[{"op":"get","ns":"app","key":"a"},
            {"op":"put","ns":"app","key":"a","value":4,"ttlSeconds":60},
            {"op":"check","ns":"app","key":"a","expect":%s},
            {"op":"check","ns":"app","key":"a","expect":1}]',
            (queen.kv_apply_v1('[{"op":"get","ns":"app","key":"a"}]')->'results'->0->>'version')::bigint + 0)::jsonb)->'results' AS r) x;

-- kv::incr_refuses_instead_of_saturating
SELECT * FROM kv('[{"op":"incr","ns":"app","key":"c","delta":10,"max":5,"ttlSeconds":60},
                   {"op":"get","ns":"app","key":"c"},
                   {"op":"incr","ns":"app","key":"c","delta":2,"max":3,"ttlSeconds":60},
                   {"op":"incr","ns":"app","key":"c","delta":2,"max":3,"ttlSeconds":60},
                   {"op":"incr","ns":"app","key":"a","ttlSeconds":60}]');

-- kv::many_and_prefix: missing is a datum; a prefix pages by key, metacharacters are data.
SELECT * FROM kv('[{"op":"put","ns":"app","key":"w%_1","value":1,"ttlSeconds":60},
                   {"op":"put","ns":"app","key":"w%_2","value":2,"ttlSeconds":60},
                   {"op":"put","ns":"app","key":"wx","value":3,"ttlSeconds":60},
                   {"op":"getMany","ns":"app","keys":["w%_1","nope"]},
                   {"op":"getPrefix","ns":"app","prefix":"w%_","limit":1},
                   {"op":"getPrefix","ns":"app","prefix":"w%_","after":"w%_1","keysOnly":true}]');

-- kv::delete_is_idempotent
SELECT * FROM kv('[{"op":"delete","ns":"app","key":"wx"},{"op":"delete","ns":"app","key":"wx"}]');

-- kv::required_rolls_everything_back: the put before the lost check is not there.
SELECT queen.kv_apply_v1('[{"op":"put","ns":"app","key":"rb","value":1,"ttlSeconds":60},
                           {"op":"check","ns":"app","key":"held","expect":7,"required":true}]');
SELECT * FROM kv('[{"op":"get","ns":"app","key":"rb"}]');

-- kv::expired_is_absent_and_maintenance_removes_it
UPDATE queen.kv SET expires_at = now() - interval '1 second' WHERE key = 'a';
SELECT * FROM kv('[{"op":"get","ns":"app","key":"a"},{"op":"putIfAbsent","ns":"app","key":"nil2","value":1,"ttlSeconds":60}]');
UPDATE queen.kv SET expires_at = now() - interval '1 second' WHERE key = 'nil2';
CALL queen.run_maintenance(p_report => NULL) \gset
SELECT :'p_report'::jsonb->'kvExpired' AS kv_expired;
SELECT count(*) AS expired_rows_left FROM queen.kv WHERE expires_at <= clock_timestamp();
SELECT queen.kv_expire_step_v1(10) AS step;

-- kv::tenancy: another tenant sees nothing of these keys.
SELECT queen.kv_apply_v1('[{"op":"get","ns":"app","key":"nil"}]', '00000000-0000-0000-0000-0000000000aa')->'results'->0->'found' AS other_tenant_found;

-- kv::bad_input: 22023 naming the op and the SDK's reason; nothing written.
SELECT queen.kv_apply_v1('[{"op":"put","ns":"NOT A NAMESPACE","key":"k","value":1,"ttlSeconds":1}]');
SELECT queen.kv_apply_v1('[{"op":"put","ns":"app","key":"k","value":1}]');
SELECT queen.kv_apply_v1('[{"op":"get","ns":"app","key":"k","bogus":1}]');
SELECT queen.kv_apply_v1('[{"op":"check","ns":"app","key":"k"}]');
SELECT count(*) AS k_rows FROM queen.kv WHERE key = 'k';

-- locks::one_holder_from_psql: queen.locks_apply_v1; a permit is a row of queen-locks.
SELECT r->'acquired' AS acquired, r->'slot' AS slot, r->>'reason' AS reason,
       r->'guard'->>'key' AS guard_key, jsonb_array_length(COALESCE(r->'holders', '[]')) AS holders
  FROM jsonb_array_elements(queen.locks_apply_v1('[
         {"op":"acquire","name":"daily","ttlSeconds":30,"owner":"a"},
         {"op":"acquire","name":"daily","ttlSeconds":30,"owner":"b"},
         {"op":"acquire","name":"daily","ttlSeconds":30,"owner":"a"}]')->'results') r;
SELECT version AS row_version FROM queen.kv WHERE ns = 'queen-locks' AND key = 'daily#0' \gset
SELECT queen.locks_apply_v1('[{"op":"get","name":"daily"}]')->'results'->0->'holders'->0->>'token' AS token \gset
SELECT :'row_version' = :'token' AS token_is_the_rows_version;
SELECT queen.locks_apply_v1(format('[{"op":"release","name":"daily","token":%s},{"op":"get","name":"daily"}]',
         :'token')::jsonb)->'results' AS released;
SELECT queen.locks_apply_v1('[{"op":"acquire","name":"a#b","ttlSeconds":30}]');

-- locks::a_released_permit_keeps_its_token: the row stays (expired, no value), and the
-- next holder's token is higher than the released one.
SELECT count(*) AS released_rows, bool_and(expires_at <= clock_timestamp()) AS expired,
       bool_and(value = 'null'::jsonb) AS value_dropped
  FROM queen.kv WHERE ns = 'queen-locks' AND key = 'daily#0';
SELECT (queen.locks_apply_v1('[{"op":"acquire","name":"daily","ttlSeconds":30,"owner":"c"}]')
          ->'results'->0->>'token')::bigint > :'token'::bigint AS next_token_higher;

-- kv::reserved_namespaces: the lock permits and the version marks are read and checked
-- through kv, never written (22023 kv_namespace_reserved); the permit is unchanged.
SELECT queen.kv_apply_v1('[{"op":"put","ns":"queen-locks","key":"daily#0","value":{"owner":"x"},"ttlSeconds":60}]');
SELECT queen.kv_apply_v1('[{"op":"delete","ns":"queen-locks","key":"daily#0"}]');
SELECT queen.kv_apply_v1('[{"op":"put","ns":"queen-kv-high-water","key":"app","value":1,"forever":true}]');
SELECT queen.kv_apply_v1('[{"op":"get","ns":"queen-locks","key":"daily#0"}]')->'results'->0->'value'->>'owner' AS owner_still;

-- kv::removed_versions_are_remembered: maintenance removes expired rows and keeps the
-- highest version per namespace as its mark; a new row starts above it.
UPDATE queen.kv SET version = version + 1000000000000, expires_at = now() - interval '1 second'
 WHERE ns = 'app' AND key = 'nil' RETURNING version AS pushed_ahead \gset
SELECT queen.kv_expire_step_v1(1000)->'removed' AS removed;
SELECT version = :'pushed_ahead' AS mark_is_the_removed_version
  FROM queen.kv WHERE ns = 'queen-kv-high-water' AND key = 'app';
SELECT (queen.kv_apply_v1('[{"op":"put","ns":"app","key":"nil","value":1,"forever":true}]')
          ->'results'->0->>'version')::bigint > :'pushed_ahead'::bigint AS new_row_above_the_mark;
