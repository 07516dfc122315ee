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
REVOKE ALL ON DATABASE brain FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE brain TO brain_owner, brain_app;
