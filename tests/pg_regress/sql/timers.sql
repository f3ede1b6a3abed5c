-- Timers from psql: queen.timers_apply_v1 schedules, reschedules and cancels,
-- queen.timers_fire_v1 delivers what is due, queen.timers_get_v1 and
-- queen.timers_list_v1 read. Each "-- timers::NAME" comment names one check.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;

-- timers::schedule_and_upsert: a new key is scheduled, the same key again rescheduled.
SELECT r->>'status' AS status, r->>'txn' AS txn, r->'ok' AS ok
  FROM jsonb_array_elements(queen.timers_apply_v1('[
    {"op":"schedule","queue":"jobs","timerKey":"due","payload":{"n":1},"delayMs":-1000,"txn":"t-due"},
    {"op":"schedule","queue":"jobs","timerKey":"later","payload":{"n":2},"delayMs":3600000,"txn":"t-later"}]')) r;
SELECT r->>'status' AS status, r->>'txn' AS txn
  FROM jsonb_array_elements(queen.timers_apply_v1('[
    {"op":"reschedule","queue":"jobs","timerKey":"later","payload":{"n":3},"delayMs":3600000,"txn":"t-later-2"}]')) r;

-- timers::peek_and_list: the stored payload (base64 of {"n":3}), a page by key.
SELECT t->'found' AS found, t->>'txn' AS txn, convert_from(decode(t->>'payload', 'base64'), 'UTF8') AS payload
  FROM queen.timers_get_v1('jobs', 'later') t;
SELECT queen.timers_get_v1('jobs', 'nothing') AS miss;
SELECT l->'truncated' AS truncated, l->>'nextAfter' AS next_after,
       (SELECT array_agg(x->>'timerKey') FROM jsonb_array_elements(l->'rows') x) AS keys
  FROM queen.timers_list_v1('jobs', NULL, 1) l;

-- timers::fire_delivers_the_due_one_once: the due timer becomes a message with its txn.
SELECT f->'fired' AS fired, f->'duplicates' AS duplicates FROM queen.timers_fire_v1() f;
SELECT f->'fired' AS fired FROM queen.timers_fire_v1() f;
SELECT r_transaction_id, r_payload FROM queen.pop('jobs', p_batch => 10);

-- timers::cancel: the txn must match when given; absent afterwards.
SELECT r->>'status' AS status, r->>'txn' AS txn
  FROM jsonb_array_elements(queen.timers_apply_v1('[{"op":"cancel","queue":"jobs","timerKey":"later","txn":"t-later"}]')) r;
SELECT r->>'status' AS status, r->>'txn' AS txn
  FROM jsonb_array_elements(queen.timers_apply_v1('[{"op":"cancel","queue":"jobs","timerKey":"later"}]')) r;
SELECT r->>'status' AS status, r->'ok' AS ok
  FROM jsonb_array_elements(queen.timers_apply_v1('[{"op":"cancel","queue":"jobs","timerKey":"later"}]')) r;

-- timers::in_order: one call's ops apply one after another, a key may appear several
-- times, each answer as if the ops ran alone in that order (Queen's rule).
-- schedule then cancel: the key is absent afterwards, both answers succeed.
SELECT r->>'status' AS status, r->'ok' AS ok, r->>'txn' AS txn
  FROM jsonb_array_elements(queen.timers_apply_v1('[
    {"op":"schedule","queue":"jobs","timerKey":"x","payload":1,"delayMs":60000,"txn":"x-1"},
    {"op":"cancel","queue":"jobs","timerKey":"x"}]')) r;
SELECT queen.timers_get_v1('jobs', 'x') AS x_after_schedule_cancel;
-- cancel then schedule: the cancel finds nothing, the schedule stays.
SELECT r->>'status' AS status, r->'ok' AS ok, r->>'txn' AS txn
  FROM jsonb_array_elements(queen.timers_apply_v1('[
    {"op":"cancel","queue":"jobs","timerKey":"x"},
    {"op":"schedule","queue":"jobs","timerKey":"x","payload":2,"delayMs":60000,"txn":"x-2"}]')) r;
SELECT t->>'txn' AS txn, convert_from(decode(t->>'payload', 'base64'), 'UTF8') AS payload
  FROM queen.timers_get_v1('jobs', 'x') t;
-- schedule twice (a fresh key "t", another key between): the first is scheduled, the
-- second rescheduled and wins; a cancel naming the first txn then finds nothing.
SELECT r->>'status' AS status, r->'ok' AS ok, r->>'txn' AS txn, r->>'timerKey' AS key
  FROM jsonb_array_elements(queen.timers_apply_v1('[
    {"op":"schedule","queue":"jobs","timerKey":"t","payload":3,"delayMs":60000,"txn":"t-3"},
    {"op":"schedule","queue":"jobs","timerKey":"a","payload":0,"delayMs":60000,"txn":"a-1"},
    {"op":"schedule","queue":"jobs","timerKey":"t","payload":4,"delayMs":60000,"txn":"t-4"},
    {"op":"cancel","queue":"jobs","timerKey":"t","txn":"t-3"},
    {"op":"cancel","queue":"jobs","timerKey":"a"}]')) r;
SELECT t->>'txn' AS txn, convert_from(decode(t->>'payload', 'base64'), 'UTF8') AS payload
  FROM queen.timers_get_v1('jobs', 't') t;
SELECT r->>'timerKey' AS key, r->>'status' AS cleanup
  FROM jsonb_array_elements(queen.timers_apply_v1('[
    {"op":"cancel","queue":"jobs","timerKey":"t"},
    {"op":"cancel","queue":"jobs","timerKey":"x"}]')) r;

-- timers::bad_input: refused with 22023, nothing written.
SELECT queen.timers_apply_v1('[{"op":"schedule","queue":"jobs","timerKey":"y","payload":1}]');
SELECT queen.timers_apply_v1('[{"op":"schedule","queue":"jobs","timerKey":"z","payload":1,"delayMs":1,"deliverAt":"x"}]');
SELECT queen.timers_apply_v1('[{"op":"schedule","queue":"jobs","timerKey":"w","payload":{"a":1},"delayMs":1,"encrypted":true}]');
SELECT queen.timers_fire_v1(0);
SELECT count(*) AS pending FROM queen.timers;
