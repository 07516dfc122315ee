-- `brain-server --tenant-embedder NAME=EMBEDDER` (issue 34): the server finds the ids of
-- the tenants it names at start-up. The tenants table is under RLS and the server's role
-- has no tenant then, so a definer function answers, for exactly the names asked, the ids
-- the server would learn anyway from any of their keys (brain_lookup_key).
CREATE FUNCTION brain_tenant_ids(p_names text[])
RETURNS TABLE (tenant_id uuid, name text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    SELECT t.tenant_id, t.name FROM tenants t WHERE t.name = ANY(p_names)
$$;
REVOKE ALL ON FUNCTION brain_tenant_ids(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_tenant_ids(text[]) TO brain_app;
