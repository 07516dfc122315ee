-- Roles and database for Shared Brain, run once by the postgres image's entrypoint on an
-- empty data volume (as the superuser, through psql). Passwords come from the container
-- environment (psql >= 15 \getenv), so none is written here. Same shape as
-- docs/operations/deployment.md: migrations run as brain_owner; brain-server logs in as brain_server, a
-- member of brain_app that owns nothing and cannot bypass row-level security.
\set ON_ERROR_STOP on
\getenv owner_password BRAIN_OWNER_PASSWORD
\getenv server_password BRAIN_SERVER_PASSWORD
\if :{?owner_password}
\else
  \warn 'BRAIN_OWNER_PASSWORD is not set in the db container'
  SELECT 1 / 0;  -- stops the init (ON_ERROR_STOP)
\endif
\if :{?server_password}
\else
  \warn 'BRAIN_SERVER_PASSWORD is not set in the db container'
  SELECT 1 / 0;
\endif

CREATE ROLE brain_owner LOGIN PASSWORD :'owner_password';
CREATE ROLE brain_app NOLOGIN;
CREATE ROLE brain_server LOGIN PASSWORD :'server_password' IN ROLE brain_app
    NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
CREATE DATABASE brain OWNER brain_owner;

\connect brain
-- pgvector needs a superuser (or a trusted-extension grant) to install; the migration's
-- CREATE EXTENSION IF NOT EXISTS then finds it.
CREATE EXTENSION IF NOT EXISTS vector;
-- So lexical search can use its GIN indexes under row-level security (docs/concepts/
-- retrieval.md, How search scales with the bucket; docs/operations/deployment.md). Only a
-- superuser may mark a function, once per database: this script runs as one, the
-- migration as brain_owner cannot, and brain-server warns at start while it is missing.
-- A data volume initialised before this line was added needs it run by hand, as postgres
-- (`docker compose exec db psql -U postgres -d brain`), with the statement below.
ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF;
REVOKE ALL ON DATABASE brain FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE brain TO brain_owner, brain_app;
