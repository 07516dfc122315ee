-- The namespace confinement reads safely in either branch (issue 29).
--
-- brain_key_confines read `current_setting('brain.confine_namespaces')::text[]` only in the
-- ELSE branch of a CASE that an unconfined key ('' = every namespace) never reaches. Citus
-- evaluates the stable function calls of a modification on the coordinator before it
-- routes it to a worker, unreachable branches included, so every write through the row-level
-- security check of an unconfined key failed there: malformed array literal: "". The cast
-- now reads '' as the empty array, as brain.labels already does; the branch is taken as
-- before, so the answer is the same on PostgreSQL for every setting.

CREATE OR REPLACE FUNCTION brain_key_confines(p_namespace text, p_user_id text, p_session_id text)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT (COALESCE(current_setting('brain.confine_user_id', true), '') = ''
            OR p_user_id IN ('', current_setting('brain.confine_user_id', true)))
       AND CASE WHEN COALESCE(current_setting('brain.confine_namespaces', true), '') = ''
                THEN true
                ELSE p_namespace = ANY (
                    COALESCE(NULLIF(current_setting('brain.confine_namespaces', true), ''),
                             '{}')::text[])
           END
       AND (COALESCE(current_setting('brain.confine_session_id', true), '') = ''
            OR p_session_id IN ('', current_setting('brain.confine_session_id', true)))
$$;
