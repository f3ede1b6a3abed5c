-- Ephemeral queues' declarations (src/ephemeral.rs declares; docs/decisions.md,
-- "Ephemeral queues"). The contents are the owning broker's and never touch the database.

-- Deletes the declaration of one queue; whether there was one.
CREATE OR REPLACE FUNCTION queen.ephemeral_delete_v1(
    p_queue text,
    p_tenant uuid DEFAULT queen.default_tenant()
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM queen.ephemeral_queues e WHERE e.tenant_id = p_tenant AND e.name = p_queue;
    RETURN FOUND;
END $$;

-- Every declaration of every tenant, as a broker loads them at start:
-- [{tenant, queue, options}], by tenant and name.
CREATE OR REPLACE FUNCTION queen.ephemeral_declared_v1() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT COALESCE(jsonb_agg(jsonb_build_object('tenant', e.tenant_id, 'queue', e.name,
                                                 'options', e.options)
                              ORDER BY e.tenant_id, e.name), '[]'::jsonb)
      FROM queen.ephemeral_queues e
$$;
