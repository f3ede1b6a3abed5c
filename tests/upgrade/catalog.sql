-- A normalised description of everything the queen_ack extension owns in this database,
-- one sorted line per fact, so that two databases can be compared with diff: an upgraded
-- one (CREATE EXTENSION ... VERSION '0.1.0' + ALTER EXTENSION UPDATE) against a fresh
-- install of the default version. Objects are named, never identified by OID.
--
-- Function bodies are compared with whitespace collapsed and `--` comments dropped, so an
-- upgrade script may re-indent a body, but not change a single token of it. Grants are
-- compared as effective privileges: a NULL ACL is spelled as the owner's default, because
-- a REVOKE in an upgrade leaves the same rights written out explicitly.
\pset format unaligned
\pset tuples_only on
\pset pager off

WITH ext AS (
    SELECT oid FROM pg_extension WHERE extname = 'queen_ack'
),
members AS (
    SELECT d.classid, d.objid FROM pg_depend d, ext
     WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
),
norm_body AS (
    SELECT p.oid,
           btrim(regexp_replace(regexp_replace(p.prosrc, '--[^\n]*', '', 'g'), '\s+', ' ', 'g')) AS body
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'queen'
),
facts AS (
    -- extension itself
    SELECT 'extension ' || e.extname || ' relocatable=' || e.extrelocatable
           || ' schema=' || e.extnamespace::regnamespace::text AS line
      FROM pg_extension e WHERE e.extname = 'queen_ack'
    UNION ALL
    -- functions and procedures: signature, result, language, flags, settings, body or symbol
    SELECT format('function %s(%s) returns %s lang=%s kind=%s vol=%s strict=%s secdef=%s parallel=%s leakproof=%s config=%s cost=%s rows=%s member=%s src=%s bin=%s',
                  p.proname, pg_get_function_arguments(p.oid),
                  COALESCE(pg_get_function_result(p.oid), '-'), l.lanname, p.prokind, p.provolatile,
                  p.proisstrict, p.prosecdef, p.proparallel, p.proleakproof,
                  COALESCE(array_to_string(p.proconfig, ';'), '-'), p.procost, p.prorows,
                  EXISTS (SELECT 1 FROM members m WHERE m.classid = 'pg_proc'::regclass AND m.objid = p.oid),
                  CASE WHEN l.lanname = 'c' THEN p.prosrc ELSE md5(b.body) END,
                  COALESCE(p.probin, '-'))
      FROM pg_proc p
      JOIN pg_namespace n ON n.oid = p.pronamespace
      JOIN pg_language l ON l.oid = p.prolang
      JOIN norm_body b ON b.oid = p.oid
     WHERE n.nspname = 'queen'
    UNION ALL
    -- function grants
    SELECT format('function-acl %s(%s) %s', p.proname, pg_get_function_identity_arguments(p.oid),
                  (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(COALESCE(p.proacl, acldefault('f', p.proowner))) a))
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'queen'
    UNION ALL
    -- relations (tables, views, sequences, indexes): kind, persistence, options, grants, membership
    SELECT format('relation %s kind=%s persistence=%s options=%s acl=%s member=%s',
                  c.relname, c.relkind, c.relpersistence,
                  COALESCE(array_to_string(c.reloptions, ';'), '-'),
                  (SELECT string_agg(a::text, ',' ORDER BY a::text)
                     FROM unnest(COALESCE(c.relacl, acldefault((CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END)::"char", c.relowner))) a),
                  EXISTS (SELECT 1 FROM members m WHERE m.classid = 'pg_class'::regclass AND m.objid = c.oid)
                  OR c.relkind IN ('i', 'S') AND EXISTS (
                      SELECT 1 FROM pg_depend d JOIN members m ON m.classid = 'pg_class'::regclass AND m.objid = d.refobjid
                       WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid))
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'queen' AND c.relkind IN ('r', 'v', 'm', 'S', 'i', 'p')
    UNION ALL
    -- columns, by name (their order inside the table does not matter to any statement we run)
    SELECT format('column %s.%s type=%s notnull=%s default=%s storage=%s collation=%s',
                  c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  COALESCE(pg_get_expr(ad.adbin, ad.adrelid), '-'), a.attstorage,
                  COALESCE((SELECT collname FROM pg_collation WHERE oid = a.attcollation AND a.attcollation <> 100), '-'))
      FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
     WHERE n.nspname = 'queen' AND c.relkind IN ('r', 'v', 'm', 'p') AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    -- constraints (primary keys, unique, foreign keys, checks)
    SELECT format('constraint %s.%s %s', c.relname, k.conname, pg_get_constraintdef(k.oid))
      FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'queen'
    UNION ALL
    -- indexes
    SELECT format('index %s', pg_get_indexdef(i.indexrelid))
      FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'queen'
    UNION ALL
    -- views: their definition
    SELECT format('view %s %s', c.relname, md5(pg_get_viewdef(c.oid, true)))
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'queen' AND c.relkind IN ('v', 'm')
    UNION ALL
    -- triggers
    SELECT format('trigger %s.%s %s', c.relname, t.tgname, pg_get_triggerdef(t.oid))
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'queen' AND NOT t.tgisinternal
    UNION ALL
    -- types the extension defines (composite types of tables are covered by their tables)
    SELECT format('type %s kind=%s', t.typname, t.typtype)
      FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
     WHERE n.nspname = 'queen' AND t.typtype IN ('e', 'd', 'r', 'm')
        OR n.nspname = 'queen' AND t.typtype = 'c'
           AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.typrelid AND c.relkind <> 'c')
    UNION ALL
    -- the schema and its grants
    SELECT format('schema %s acl=%s', n.nspname,
                  (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(COALESCE(n.nspacl, acldefault('n', n.nspowner))) a))
      FROM pg_namespace n WHERE n.nspname = 'queen'
    UNION ALL
    -- what the broker role may do, spelled out (also catches grants outside the schema's ACLs)
    SELECT format('broker-role %s', r.rolname) || ' login=' || r.rolcanlogin
      FROM pg_roles r WHERE r.rolname = 'queen_broker'
)
SELECT line FROM facts ORDER BY line COLLATE "C";
