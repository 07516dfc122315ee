"""Generated code in clients/v1 matches protos/ exactly, and imports from the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from brain.clients.codegen import generate, repo_root


def test_generated_code_matches_protos(tmp_path: Path) -> None:
    """Regenerating from protos/ reproduces clients/v1 byte for byte (no drift)."""
    out = tmp_path / "v1"
    generate(repo_root() / "protos", out)
    committed = repo_root() / "clients" / "v1"
    fresh = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    current = {
        p.name: p.read_bytes()
        for p in committed.iterdir()
        if p.is_file() and p.suffix in (".py", ".pyi", ".typed")
    }
    assert sorted(fresh) == sorted(current), "files differ; run `make proto`"
    stale = [name for name in fresh if fresh[name] != current[name]]
    assert not stale, f"{stale} drifted from protos/; run `make proto` and commit"
    assert len(fresh) > 10


def test_generated_modules_import_without_path_tricks(tmp_path: Path) -> None:
    """A fresh interpreter, started outside the checkout, imports brain.v1 from the package."""
    code = (
        "from brain.v1 import memory_pb2, memory_pb2_grpc, common_pb2\n"
        "r = memory_pb2.SaveMemoryRequest(scope=common_pb2.Scope(namespace='n'))\n"
        "assert memory_pb2_grpc.MemoryServiceStub\n"
        "print(r.scope.namespace)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "n"


def test_every_request_carries_scope_as_field_one() -> None:
    """Every RPC's request message has `Scope scope = 1`; no RPC takes opaque JSON."""
    from google.protobuf import descriptor_pool

    from brain.v1 import audit_pb2, graph_pb2, identity_pb2, knowledge_pb2, memory_pb2, review_pb2

    seen = 0
    for module in (memory_pb2, review_pb2, audit_pb2, identity_pb2, knowledge_pb2, graph_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                field = method.input_type.fields_by_number[1]
                assert field.name == "scope", method.full_name
                assert field.message_type.full_name == "brain.v1.Scope", method.full_name
                for f in method.input_type.fields:
                    assert f.message_type is None or f.message_type.full_name not in (
                        "google.protobuf.Struct",
                        "google.protobuf.Any",
                        "google.protobuf.Value",
                    ), f"{method.full_name}.{f.name} is opaque"
                seen += 1
    assert seen == 27
    assert descriptor_pool.Default().FindServiceByName("brain.v1.MemoryService")
