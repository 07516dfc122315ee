"""brain-admin refuses what it cannot store or what the server would not accept: one line
`brain-admin: error: ...` naming the argument, exit 2, no traceback, nothing written; the
same commands with valid values work (each test's positive control).

Run as an operator runs it: `python -m brain.server.admin.main` in a process of its own,
against the suite's PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc

from brain.v1 import common_pb2, review_pb2

from .conftest import BrainServer, PgCluster, unique
from .helpers import Api
from .zygote import run_module

NOT_UTF8 = os.fsdecode(b"\xff")  # what Python makes of that byte in argv: a lone surrogate


def assert_refused(done: subprocess.CompletedProcess[str], argument: str) -> None:
    """Exit 2 with one line `brain-admin: error: ...` that names ``argument``; no traceback."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("brain-admin: error: "), done.stderr
    assert argument in lines[0], done.stderr
    assert done.stdout == "", done.stdout


def snapshot(brain_server: BrainServer, tenant: str) -> dict[str, Any]:
    """What a refused command must leave as it was: tenants, keys, their revocations and
    expiries, namespace policies, readmitted tombstones and the tenant's audit events."""
    row = brain_server.sql(
        """SELECT (SELECT count(*) FROM tenants) AS tenants,
                  (SELECT count(*) FROM api_keys) AS keys,
                  (SELECT count(revoked_at) FROM api_keys) AS revoked,
                  (SELECT count(expires_at) FROM api_keys) AS expiring,
                  (SELECT count(*) FROM namespace_policies) AS policies,
                  (SELECT count(readmitted_at) FROM tombstones) AS readmitted,
                  (SELECT count(*) FROM audit_events a JOIN tenants t USING (tenant_id)
                   WHERE t.name = $1) AS events""",
        tenant,
    )[0]
    return dict(row)


def admin_argv(brain_server: BrainServer, *args: str | bytes) -> subprocess.CompletedProcess[str]:
    """brain-admin as a shell starts it: a new Python process whose argv holds these bytes,
    decoded by that process itself."""
    return subprocess.run(
        [
            sys.executable, "-m", "brain.server.admin.main",
            "--database-url", brain_server.cluster.owner_dsn,
            "--pepper-file", str(brain_server.cluster.pepper_file), *args,
        ],
        capture_output=True, text=True, errors="backslashreplace", timeout=60, check=False,
    )  # fmt: skip


def keys_of(brain_server: BrainServer, tenant: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(
        brain_server.admin("keys", "list", "--tenant", tenant, "--json").stdout
    )
    return listed


async def test_arguments_that_are_not_utf8_are_refused_naming_them(
    brain_server: BrainServer, channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    """A string argument that is not UTF-8, of any sub-command, is refused by name before
    anything is read or written (once it reached the database as a DataError traceback);
    the same commands with UTF-8 values, non-ASCII ones too, work."""
    tenant = unique("utf8")
    key = brain_server.mint_key(
        tenant, "alice", permissions="memories:read,memories:write,memories:forget"
    )
    api = Api(channel, key)
    await api.forget((await api.save("utf8 check: a fact to forget")).memory.id)
    listed = brain_server.admin("tombstones", "list", "--tenant", tenant, "--json").stdout
    tombstone = json.loads(listed)[0]["tombstone_id"]
    key_id = keys_of(brain_server, tenant)[0]["key_id"]
    before = snapshot(brain_server, tenant)

    # The bytes as a shell passes them, decoded by the CLI's own interpreter.
    done = admin_argv(brain_server, "tenants", "create", b"\xff\xfe")
    assert_refused(done, "argument name: b'\\xff\\xfe' is not UTF-8")
    create = ("keys", "create", "--tenant", tenant, "--principal", "bob")
    for args, named in [
        (("keys", "create", "--tenant", tenant, "--principal", NOT_UTF8), "--principal"),
        (("keys", "create", "--tenant", NOT_UTF8, "--principal", "bob"), "--tenant"),
        ((*create, "--description", NOT_UTF8), "--description"),
        ((*create, "--namespace", "proj", "--namespace", NOT_UTF8), "--namespace"),
        ((*create, "--user", f"ann{NOT_UTF8}"), "--user"),
        (("keys", "revoke", NOT_UTF8), "key_id"),
        (("keys", "rotate", NOT_UTF8), "key_id"),
        (("keys", "list", "--tenant", NOT_UTF8), "--tenant"),
        (("tombstones", "readmit", "--tenant", tenant, NOT_UTF8), "tombstone_id"),
        (("tombstones", "list", "--tenant", tenant, "--namespace", NOT_UTF8), "--namespace"),
        (("namespaces", "set", "--tenant", tenant, NOT_UTF8, "--max-pending", "5"), "namespace"),
        (("tenants", "set-quota", NOT_UTF8, "--memories", "5"), "tenant"),
        (("backup", "--tenant", NOT_UTF8, "--out", str(tmp_path / "b.jsonl")), "--tenant"),
        (("conflicts", "list", "--tenant", NOT_UTF8), "--tenant"),
        (("audit", "verify", "--tenant", NOT_UTF8), "--tenant"),
    ]:
        assert_refused(brain_server.admin(*args, check=False), f"argument {named}: b'")
    assert snapshot(brain_server, tenant) == before
    assert not (tmp_path / "b.jsonl").exists()

    # Positive controls: the same commands with UTF-8 values do their work.
    done = admin_argv(brain_server, "tenants", "create", unique("utf8-ok").encode())
    assert done.returncode == 0, done.stderr
    made = json.loads(
        brain_server.admin(*create[:5], "bjørn", "--description", "clé de test", "--json").stdout
    )
    assert made["principal"] == "bjørn"
    brain_server.admin("keys", "revoke", key_id)
    brain_server.admin("tombstones", "readmit", "--tenant", tenant, tombstone)
    states = {k["key_id"]: (k["principal"], k["state"]) for k in keys_of(brain_server, tenant)}
    assert states == {key_id: ("alice", "revoked"), made["key_id"]: ("bjørn", "active")}
    assert snapshot(brain_server, tenant)["readmitted"] == before["readmitted"] + 1


def test_durations_are_bounded_and_an_expiry_is_positive(brain_server: BrainServer) -> None:
    """--expires-in and --grace longer than 100 years (once an OverflowError traceback)
    and an expiry of zero (once an already-expired key) are refused by name and change
    nothing; 100 years exactly, 90d and a 1h grace work."""
    tenant = unique("dur")
    brain_server.mint_key(tenant, "alice")
    key_id = keys_of(brain_server, tenant)[0]["key_id"]
    create = ("keys", "create", "--tenant", tenant, "--principal", "bob")
    before = snapshot(brain_server, tenant)
    for args, named in [
        ((*create, "--expires-in", "99999999d"), "--expires-in"),
        ((*create, "--expires-in", "36501d"), "--expires-in"),
        ((*create, "--expires-in", "0d"), "--expires-in"),
        ((*create, "--expires-in", "0s"), "--expires-in"),
        ((*create, "--expires-in", "soon"), "--expires-in"),
        (("keys", "rotate", key_id, "--grace", "99999999d"), "--grace"),
        (("keys", "rotate", key_id, "--grace", "5300w"), "--grace"),
    ]:
        assert_refused(brain_server.admin(*args, check=False), named)
    assert snapshot(brain_server, tenant) == before

    now = datetime.now(UTC)
    made = json.loads(brain_server.admin(*create, "--expires-in", "90d", "--json").stdout)
    expires = datetime.fromisoformat(made["expires_at"])
    assert timedelta(days=89) < expires - now < timedelta(days=91)
    far = json.loads(brain_server.admin(*create, "--expires-in", "36500d", "--json").stdout)
    assert datetime.fromisoformat(far["expires_at"]).year >= now.year + 99
    brain_server.admin("keys", "rotate", key_id, "--grace", "1h")
    revoked_at = brain_server.sql("SELECT revoked_at FROM api_keys WHERE key_id = $1", key_id)[0][0]
    assert timedelta(minutes=59) < revoked_at - now < timedelta(minutes=61)


def test_counts_are_held_to_their_columns(brain_server: BrainServer) -> None:
    """--max-pending (an integer column) past 2**31-1, zero or not a number, and a
    backfill --batch past it, are refused by name (once a DataError traceback) and change
    nothing; the largest value works."""
    tenant = unique("int32")
    brain_server.mint_key(tenant, "alice")
    ns = ("namespaces", "set", "--tenant", tenant, "proj", "--max-pending")
    before = snapshot(brain_server, tenant)
    for value in ("99999999999999", "2147483648", "0", "-1", "many"):
        assert_refused(brain_server.admin(*ns, value, check=False), "--max-pending")
    backfill = ("embeddings", "backfill", "--tenant", tenant, "--batch")
    assert_refused(brain_server.admin(*backfill, "9" * 20, check=False), "--batch")
    assert_refused(brain_server.admin(*backfill, "0", check=False), "--batch")
    assert snapshot(brain_server, tenant) == before

    brain_server.admin(*ns, "2147483647")
    policy = brain_server.sql(
        """SELECT max_pending FROM namespace_policies p JOIN tenants t USING (tenant_id)
           WHERE t.name = $1 AND p.namespace = 'proj'""",
        tenant,
    )
    assert [r["max_pending"] for r in policy] == [2**31 - 1]
    done = brain_server.admin(*backfill, "2147483647")  # the tenant has nothing to embed
    assert "backfilled 0 memories" in done.stdout, done.stdout + done.stderr


async def test_candidate_ttl_is_held_to_the_servers_review_window(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A namespace's --candidate-ttl stands in for review_within, so it is refused by name
    past the server's 30 days (once every proposal there without review_within then failed
    on a field its caller never set) and at zero (proposals invisible at once), writing no
    policy; 30d works and proposals there succeed; BRAIN_MAX_CANDIDATE_TTL_DAYS, which the
    server reads, moves the bound for brain-admin too."""
    tenant = unique("ttl")
    agent = Api(
        channel,
        brain_server.mint_key(tenant, "agent:a", permissions="memories:read,memories:propose"),
    )
    ns = ("namespaces", "set", "--tenant", tenant, "proj", "--candidate-ttl")
    before = snapshot(brain_server, tenant)
    for value in ("99999999d", "31d", "721h", "0d", "0s"):
        assert_refused(brain_server.admin(*ns, value, check=False), "--candidate-ttl")
    assert snapshot(brain_server, tenant) == before

    async def days_to_review(namespace: str) -> timedelta:
        """How long a proposal there, without review_within, waits for review."""
        api = Api(channel, agent.key, namespace=namespace)
        proposed = await api.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=api.scope(),
                memory=common_pb2.MemoryDraft(content=f"a proposal in {namespace}"),
                reason="checking the namespace's candidate TTL",
            ),
            metadata=api.md,
        )
        assert proposed.candidate.status == common_pb2.MEMORY_STATUS_CANDIDATE
        return proposed.candidate.candidate_expires_at.ToDatetime(tzinfo=UTC) - datetime.now(UTC)

    brain_server.admin(*ns, "30d")
    assert timedelta(days=29) < await days_to_review("proj") <= timedelta(days=30)

    # The server's own variable moves the bound (another namespace: the server here keeps 30).
    env = {**os.environ, "BRAIN_MAX_CANDIDATE_TTL_DAYS": "60"}
    wider = ("--database-url", brain_server.cluster.owner_dsn, "namespaces", "set")
    wider += ("--tenant", tenant, "wide", "--candidate-ttl")
    done = run_module("brain.server.admin.main", *wider, "61d", env=env)
    assert_refused(done, "--candidate-ttl")
    done = run_module("brain.server.admin.main", *wider, "45d", env=env)
    assert done.returncode == 0 and "candidate_ttl=45 days" in done.stdout, done.stderr
    # A policy longer than the serving server allows (set under a larger bound, or stored
    # before brain-admin checked it) is capped at the server's 30 days; a proposal there
    # no longer fails on a review_within its caller never set.
    assert timedelta(days=29) < await days_to_review("wide") <= timedelta(days=30)


def test_principal_is_held_to_the_servers_filters_without_control_characters(
    brain_server: BrainServer,
) -> None:
    """A principal longer than the server's principal filters take (256 characters), with
    a newline, an escape or another control character, or blank, is refused by name and
    mints nothing; 256 characters and non-ASCII letters work."""
    tenant = unique("principal")
    brain_server.mint_key(tenant, "alice")
    create = ("keys", "create", "--tenant", tenant, "--principal")
    before = snapshot(brain_server, tenant)
    for value in ("x" * 257, "x" * 10_000, "eve\nadmin:root", "eve\x1b[2K", "eve\x7f", "a\u2028b"):
        assert_refused(brain_server.admin(*create, value, check=False), "--principal")
    assert_refused(brain_server.admin(*create, "  ", check=False), "--principal")
    assert snapshot(brain_server, tenant) == before

    longest = "agent:" + "x" * 250
    brain_server.admin(*create, longest)
    brain_server.admin(*create, "agent:Zoë")
    assert {k["principal"] for k in keys_of(brain_server, tenant)} == {
        "alice",
        longest,
        "agent:Zoë",
    }


def test_listing_an_unknown_tenant_names_it(brain_server: BrainServer) -> None:
    """`keys list` and `namespaces list` of a tenant that does not exist say so (as every
    other sub-command does) instead of printing an empty list with exit 0; of one that
    exists, they list it."""
    missing = unique("nosuch")
    for group in ("keys", "namespaces"):
        done = brain_server.admin(group, "list", "--tenant", missing, check=False)
        assert_refused(done, f"no tenant named {missing!r}")

    tenant = unique("listed")
    brain_server.mint_key(tenant, "alice")
    brain_server.admin("namespaces", "set", "--tenant", tenant, "proj", "--max-pending", "5")
    assert [k["principal"] for k in keys_of(brain_server, tenant)] == ["alice"]
    listed = brain_server.admin("namespaces", "list", "--tenant", tenant, "--json").stdout
    assert [(p["namespace"], p["max_pending"]) for p in json.loads(listed)] == [("proj", 5)]


def test_restore_of_a_file_that_is_not_utf8_restores_nothing(
    brain_server: BrainServer,
    pg_cluster: PgCluster,
    fresh_database: tuple[str, str],
    tmp_path: Path,
) -> None:
    """A backup file that is not UTF-8, from its first byte or on a later line, is refused
    as a line that is not JSON is (once a UnicodeDecodeError traceback), and nothing is
    restored; the intact file restores."""
    empty_database = fresh_database[0]  # the owner's DSN
    tenant = unique("restore")
    brain_server.mint_key(tenant, "alice")
    brain_server.admin("namespaces", "set", "--tenant", tenant, "proj", "--max-pending", "5")
    path = tmp_path / "tenant.jsonl"
    brain_server.admin("backup", "--tenant", tenant, "--out", str(path))
    good = path.read_bytes()
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\xff\xfe\n")
    broken = tmp_path / "broken.jsonl"  # a valid header, then a line cut inside a character
    lines = good.splitlines(keepends=True)
    broken.write_bytes(b"".join([*lines[:2], b'{"table": "caf\xc3\n', *lines[2:]]))

    def restore(file: Path) -> subprocess.CompletedProcess[str]:
        return run_module(
            "brain.server.admin.main", "--database-url", empty_database,
            "--pepper-file", str(pg_cluster.pepper_file), "restore", str(file),
        )  # fmt: skip

    def tenants() -> list[str]:
        async def names() -> list[str]:
            conn = await asyncpg.connect(empty_database)
            try:
                return [r["name"] for r in await conn.fetch("SELECT name FROM tenants")]
            finally:
                await conn.close()

        return brain_server.loop.run(names())

    migrated = run_module(
        "brain.server.admin.main", "--database-url", empty_database, "migrate", timeout=60
    )
    assert migrated.returncode == 0, migrated.stderr
    assert_refused(restore(garbage), "line 1 is not UTF-8 text")
    done = restore(broken)
    assert_refused(done, "line 3 is not UTF-8 text")
    assert "(nothing was restored)" in done.stderr
    assert tenants() == []

    done = restore(path)
    assert done.returncode == 0, done.stderr
    assert tenants() == [tenant]


def test_a_data_dir_without_a_cluster_is_refused_not_created(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """With no database URL, brain-admin works on the cluster brain-server made in the data
    directory. A directory without one (a mistyped --data-dir, a BRAIN_DATA_DIR the server
    does not use) is named and refused: no cluster and no pepper appear there, so no key or
    tenant lands in a database no server reads."""
    tenant = unique("datadir")
    missing = tmp_path / "typo"
    env = {k: v for k, v in os.environ.items() if not k.endswith("DATABASE_URL")}
    for args in (
        ("tenants", "list"),
        ("tenants", "create", tenant),
        ("keys", "create", "--tenant", tenant, "--principal", "agent:x"),
    ):
        done = run_module(
            "brain.server.admin.main", "--data-dir", str(missing), *args, env=env, timeout=60
        )
        assert_refused(done, str(missing))
        assert "no embedded PostgreSQL" in done.stderr
        assert not missing.exists() or list(missing.iterdir()) == []  # no cluster, no pepper
    # Control: the same commands on the database work.
    brain_server.admin("tenants", "create", tenant)
    assert tenant in brain_server.admin("tenants", "list").stdout


def test_an_empty_permission_list_is_refused_not_read_as_the_default(
    brain_server: BrainServer,
) -> None:
    """`--permissions ''` (a variable left empty in a script) minted a memories:read key as
    if the flag were absent; it is refused by name, nothing minted. Without the flag the key
    gets memories:read, as documented."""
    tenant = unique("perms")
    brain_server.admin("tenants", "create", tenant)
    before = snapshot(brain_server, tenant)
    for empty in ("", " ", ","):
        done = brain_server.admin(
            "keys", "create", "--tenant", tenant, "--principal", "p", "--permissions", empty,
            check=False,
        )  # fmt: skip
        assert_refused(done, "--permissions")
    assert snapshot(brain_server, tenant) == before
    brain_server.admin("keys", "create", "--tenant", tenant, "--principal", "p")
    assert [k["permissions"] for k in keys_of(brain_server, tenant)] == [["memories:read"]]
