"""`brain-eval conflicts`: the labelled set is fixed and consistent, the figures are counted
from what the server answered, and a small run goes end to end against a real server.

No figure of detection quality is asserted here: that is the implementation's to earn and
the command's to print.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from brain.server.measure.conflicts import checks, generate, score
from brain.server.measure.conflicts.dev_bank import BANK as DEV
from brain.server.measure.conflicts.generate import VARIANTS
from brain.server.measure.conflicts.heldout_bank import BANK as HELDOUT
from brain.server.measure.conflicts.model import (
    RULES,
    Case,
    LabelledSet,
    Placement,
    check,
    check_set,
    dump,
    load,
    reaches,
    sees,
)
from brain.server.measure.conflicts.report import format_table
from brain.server.measure.conflicts.runner import Runner, namespace, provision
from brain.server.measure.conflicts.trace import Cluster, Seen, Trace, Where
from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc, review_pb2, review_pb2_grpc

from .conftest import BrainServer
from .zygote import run_module

WIDER = {"wider_user", "wider_session", "wider_labels"}


def test_the_generator_gives_the_same_set_for_the_same_seed(tmp_path: Path) -> None:
    """Two generations with the seed are byte-identical as JSON; another seed differs."""
    dump(generate("dev"), tmp_path / "one.json")
    dump(generate("dev"), tmp_path / "two.json")
    dump(generate("dev", seed=31), tmp_path / "other.json")
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()
    assert (tmp_path / "one.json").read_bytes() != (tmp_path / "other.json").read_bytes()


def test_dump_and_load_round_trip_and_a_bad_file_names_what_is_wrong(tmp_path: Path) -> None:
    """A dumped set loads back equal; a file of another format is refused by name."""
    labelled = generate("heldout")
    dump(labelled, tmp_path / "set.json")
    assert load(tmp_path / "set.json") == labelled
    (tmp_path / "bad.json").write_text(json.dumps({"cases": []}))
    with pytest.raises(ValueError, match="format"):
        load(tmp_path / "bad.json")


def test_dev_and_heldout_share_no_template_subject_or_statement() -> None:
    """The held-out split is written from other templates and other words than dev."""
    assert DEV.templates() and HELDOUT.templates()  # control: both banks were read
    assert not DEV.templates() & HELDOUT.templates()
    assert not DEV.subjects() & HELDOUT.subjects()
    texts = {s: set() for s in ("dev", "heldout")}
    for split, found in texts.items():
        for c in generate(split).cases:
            found.update((c.older.text, c.newer.text))
    assert len(texts["dev"]) > 400 and not texts["dev"] & texts["heldout"]


@pytest.mark.parametrize("split", ["dev", "heldout"])
def test_each_split_has_hundreds_of_pairs_of_every_kind_and_placement(split: str) -> None:
    """Every kind, every rule and every wall variant is there in numbers."""
    labelled = generate(split)
    assert len(labelled.cases) >= 300
    positives = [c for c in labelled.cases if c.conflict]
    for rule in RULES:
        assert sum(c.rule == rule for c in positives) >= 20, rule
    kinds = {c.kind for c in labelled.cases if c.expect == "none"}
    assert {"multi_valued", "lookalike", "many_valued", "historical"} <= kinds
    assert {c.variant for c in labelled.cases} == {"same", *VARIANTS}
    assert {c.path for c in labelled.cases} == {"save", "update", "approve"}
    assert len(labelled.consolidation) >= 5
    assert all(len(s.groups()) >= 3 for s in labelled.consolidation)


@pytest.mark.parametrize("split", ["dev", "heldout"])
def test_labels_agree_with_the_wall_rule(split: str) -> None:
    """A split pair is must-not-propose exactly when its newer memory is narrower or
    elsewhere; every case passes `check`; the statements of a case differ."""
    for c in generate(split).cases:
        check(c)
        assert c.must_not_propose == (c.variant not in WIDER | {"same"}), c.id
        if c.variant in ("other_tenant", "other_namespace", "other_user_confined"):
            assert c.must_not_propose and not c.writer_sees_older
        assert c.older.text != c.newer.text or c.older_at != c.newer_at
    for k in generate(split).consolidation:
        check_set(k)


def test_the_consistency_checks_catch_a_mislabelled_pair_and_a_duplicate() -> None:
    """The label check fails for a cross-tenant pair labelled as proposable, and the set
    check for a copy its writer would get back as the original (controls)."""
    case = next(c for c in generate("dev").cases if c.variant == "other_tenant")
    with pytest.raises(ValueError, match="must_not_propose"):
        check(replace(case, must_not_propose=False))
    kset = generate("dev").consolidation[0]
    members = [replace(m, at=Placement(labels=("ops",))) if m.group == "g0@ops" else m
               for m in kset.members]  # fmt: skip
    with pytest.raises(ValueError, match="would be saved as member"):
        check_set(replace(kset, members=tuple(members)))


def test_the_wall_rule_and_visibility_rule() -> None:
    """Wider reaches, narrower and sideways do not; a confined writer does not see others."""
    team, alice = Placement(), Placement(user="alice")
    assert reaches(team, alice) and not reaches(alice, team)
    assert not reaches(Placement(labels=("ops",)), team)
    assert reaches(Placement(labels=("team", "ops")), team)
    assert not reaches(Placement(tenant="b"), team)
    assert sees(Placement(user="bob"), team) and not sees(Placement(user="bob"), alice)
    assert not sees(Placement(labels=("ops",), writer="ops"), team)


# -- scoring, on traces built by hand ------------------------------------------------------


def _small() -> LabelledSet:
    cases = generate("dev").cases
    pick = [
        next(c for c in cases if c.kind == "value_update" and c.variant == "same"),
        next(c for c in cases if c.kind == "restatement" and c.variant == "same"),
        next(c for c in cases if c.kind == "multi_valued"),
        next(c for c in cases if c.variant == "narrower_user"),
    ]
    return LabelledSet("dev", 30, tuple(pick), generate("dev").consolidation[:1])


def _trace(labelled: LabelledSet) -> Trace:
    trace = Trace()
    for c in labelled.cases:
        older, newer = f"{c.id}-old", f"{c.id}-new"
        trace.pairs[c.id] = (older, newer)
        for mid, at in ((older, c.older_at), (newer, c.newer_at)):
            trace.written[mid] = Where(at.tenant, c.id, "x", at, namespace(c.id, at))
    return trace


def _seen(c: Case, rule: str, state: str = "OPEN", reverse: bool = False) -> Seen:
    older, newer = f"{c.id}-old", f"{c.id}-new"
    if reverse:
        older, newer = newer, older
    return Seen("list", "a", "cid" if state == "OPEN" else "", newer, older, rule, state)


def test_a_reported_pair_counts_where_its_label_says() -> None:
    """A true pair with its rule is a hit; a multi-valued pair proposed is a false supersede;
    a reversed pair is a false detection; nothing reported scores zero."""
    labelled = _small()
    update, restated, multi, split = labelled.cases
    trace = _trace(labelled)
    empty = score(labelled, trace)
    assert empty["detection"]["recall"] == {"rate": 0.0, "k": 0, "n": 2}
    trace.seen += [
        _seen(update, "VALUE_UPDATE"),
        _seen(restated, "VALUE_UPDATE"),  # the wrong action for a restatement
        _seen(multi, "VALUE_UPDATE"),
        _seen(update, "CORRECTION", reverse=True),
    ]
    figures = score(labelled, trace)
    d = figures["detection"]
    assert d["recall"]["k"] == 1 and d["precision"] == {"rate": 0.25, "k": 1, "n": 4}
    assert d["rules"]["VALUE_UPDATE"]["agreement"]["k"] == 1
    assert d["false_detections"] == {"multi_valued:plain": 1, "reversed": 1,
                                     "restatement:single_valued": 1}  # fmt: skip
    assert figures["false_supersedes"]["rate"]["k"] == 1
    assert figures["false_supersedes"]["restatements_as_supersede"]["k"] == 1
    assert figures["walls"]["cross_scope_proposals"] == 0
    assert split.must_not_propose


def test_a_proposal_across_a_wall_is_counted_and_a_noted_one_is_not() -> None:
    """A recorded conflict on a narrower pair is a cross-scope proposal; NOTED is only noted;
    a cluster mixing cells is a cross-cell cluster."""
    labelled = _small()
    split = labelled.cases[3]
    trace = _trace(labelled)
    trace.seen.append(_seen(split, "VALUE_UPDATE", state="NOTED"))
    walls = score(labelled, trace)["walls"]
    assert walls["cross_scope_proposals"] == 0 and walls["noted"]["k"] == 1
    trace.seen.append(_seen(split, "VALUE_UPDATE"))
    kset = labelled.consolidation[0]
    one, other = (next(i for i, m in enumerate(kset.members) if m.group == g)
                  for g in ("g0", "g0@alice"))  # fmt: skip
    trace.consolidated_sets.append(kset.id)
    trace.clusters.append(Cluster(kset.id, (one, other), "cand", "text", one, in_cell=False))
    figures = score(labelled, trace)
    walls = figures["walls"]
    assert walls["cross_scope_conflicts"] == 1 and walls["cross_cell_clusters"] == 1
    assert walls["must_not_propose_proposed"]["k"] == 1
    assert figures["consolidation"]["precision"] == {"rate": 0.0, "k": 0, "n": 1}


# -- end to end ----------------------------------------------------------------------------


def _end_to_end_set() -> LabelledSet:
    """One case of each kind in one cell, the update and approve paths, three wall
    variants, one consolidation set."""
    full = generate("dev")
    chosen: dict[tuple[str, str], Case] = {}
    for c in full.cases:
        if c.variant == "same" and c.path == "save":
            chosen.setdefault((c.kind, "save"), c)
        elif c.variant == "same" and c.kind == "value_update":
            chosen.setdefault((c.kind, c.path), c)
        elif c.variant in ("other_user_confined", "wider_user", "other_tenant"):
            chosen.setdefault(("", c.variant), c)
    return LabelledSet("dev", full.seed, tuple(chosen.values()), full.consolidation[:1])


async def test_a_small_run_writes_the_set_as_labelled_and_scores_what_the_server_said(
    brain_server: BrainServer,
) -> None:
    """Every memory of the run is where its label puts it, the listing the runner recorded
    is what the server lists to another key, and the figures move with the trace."""
    labelled = _end_to_end_set()
    assert {c.path for c in labelled.cases} == {"save", "update", "approve"}
    tenants = await provision(brain_server.cluster.owner_dsn, brain_server.cluster.pepper)
    auditor = brain_server.mint_key(
        tenants.names["a"], "auditor", permissions="memories:read", labels=("team", "ops")
    )
    md = (("authorization", f"Bearer {auditor}"),)
    async with brain_server.channel() as channel:
        run = Runner(channel, tenants)
        await run.write_all(labelled, 4, lambda *_: None)
        await run.list_all()
        await run.check_leaks()
        await checks.marks(run, labelled)
        trace = run.trace
        memory = memory_pb2_grpc.MemoryServiceStub(channel)
        review = review_pb2_grpc.ReviewServiceStub(channel)
        assert trace.errors == [] and set(trace.pairs) == {c.id for c in labelled.cases}
        for c in labelled.cases:
            if c.newer_at.tenant != "a" or c.older_at.tenant != "a":
                continue
            for mid, st, at in zip(trace.pairs[c.id], (c.older, c.newer),
                                   (c.older_at, c.newer_at), strict=True):  # fmt: skip
                got = await memory.GetMemory(
                    memory_pb2.GetMemoryRequest(
                        scope=common_pb2.Scope(namespace=namespace(c.id, at)), id=mid
                    ),
                    metadata=md,
                )
                m = got.memory
                assert (m.content, m.scope.user_id, m.scope.session_id, sorted(m.labels)) == (
                    st.text, at.user, at.session, sorted(at.labels)
                ), c.id  # fmt: skip
                assert m.status == common_pb2.MEMORY_STATUS_ACTIVE
        listed = set()
        try:
            for ns in sorted({w.namespace for w in trace.written.values() if w.tenant == "a"}):
                answer = await review.ListConflicts(
                    review_pb2.ListConflictsRequest(
                        scope=common_pb2.Scope(namespace=ns), states=list(range(1, 5)),
                        page_size=100,
                    ),
                    metadata=md,
                )  # fmt: skip
                listed |= {(x.older_id, x.newer_id, x.rule) for x in answer.conflicts}
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.UNIMPLEMENTED
            assert "ListConflicts" in trace.unavailable
        recorded = {
            (s.older_id, s.newer_id, common_pb2.ConflictRule.Value(f"CONFLICT_RULE_{s.rule}"))
            for s in trace.seen
            if s.source == "list" and s.tenant == "a"
        }
        assert recorded == listed
    figures = score(labelled, trace)
    assert figures["cases"] == {"labelled": len(labelled.cases), "written": len(labelled.cases)}
    assert "cross-scope proposals" in format_table(figures, "heading")
    # The figures are counted from the trace: one more report of a true pair, one more hit
    # (unless the server had found it already).
    case = next(c for c in labelled.cases if c.conflict and c.rule == "VALUE_UPDATE")
    older, newer = trace.pairs[case.id]
    before = figures["detection"]["recall"]["k"]
    already = any(s.older_id == older and s.newer_id == newer for s in trace.seen)
    trace.seen.append(Seen("save", "a", "", newer, older, "VALUE_UPDATE", "OPEN"))
    assert score(labelled, trace)["detection"]["recall"]["k"] == before + (not already)


def brain_eval(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, in a process of its own (brain-eval sets up logging
    for its process, which must not outlive a test in the suite's)."""
    return run_module("brain.server.measure.evaluation", *args, timeout=60)


def test_dump_from_the_command_line_writes_a_loadable_set(tmp_path: Path) -> None:
    """`brain-eval conflicts --split heldout --dump FILE` needs no server."""
    done = brain_eval("conflicts", "--split", "heldout", "--limit", "1", "--dump",
                      str(tmp_path / "h.json"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded = load(tmp_path / "h.json")
    assert loaded.split == "heldout" and 40 <= len(loaded.cases) < 100


def test_a_malformed_data_file_exits_2_with_one_line(tmp_path: Path) -> None:
    """--data with a file that is not a conflict set is a usage error, not a traceback."""
    (tmp_path / "x.json").write_text("[1, 2")
    done = brain_eval("conflicts", "--data", str(tmp_path / "x.json"))
    assert done.returncode == 2
    err = done.stderr.strip()
    assert err.startswith("brain-eval: error:") and "\n" not in err
