"""MkDocs hook: the gRPC API reference, generated from ``protos/brain/v1`` at every build.

protoc (from grpcio-tools) compiles the protos with their comments into a descriptor set;
one page per ``.proto`` file lists its services (every method, its request and response,
the method's comment) and its messages and enums (every field with its number, type and
comment). Nothing is written to disk: the pages exist only in the build, so the reference
cannot drift from the protos.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
PACKAGE = "brain/v1"
PREFIX = ".brain.v1."

# FieldDescriptorProto.Type -> the name written in a .proto file.
_SCALARS = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in descriptor_pb2.FieldDescriptorProto.Type.items()
}
# Paths into FileDescriptorProto (descriptor.proto field numbers) that carry comments.
_MESSAGE, _ENUM, _SERVICE = 4, 5, 6
_FIELD, _NESTED, _NESTED_ENUM, _VALUE, _METHOD = 2, 3, 4, 2, 2


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """Every proto of the package, compiled with its comments."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    well_known = Path(protoc.__file__).parent / "_proto"
    protos = sorted((PROTOS / PACKAGE).glob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        args = [
            "protoc",
            f"-I{PROTOS}",
            f"-I{well_known}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            *(str(p.relative_to(PROTOS)) for p in protos),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc could not compile protos/brain/v1")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def comments(proto: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    """Leading (else trailing) comment of every element, by its source path."""
    found: dict[tuple[int, ...], str] = {}
    for loc in proto.source_code_info.location:
        text = (loc.leading_comments or loc.trailing_comments).strip()
        if text:
            found[tuple(loc.path)] = " ".join(line.strip() for line in text.splitlines())
    return found


_MAPS: dict[str, descriptor_pb2.DescriptorProto] = {}  # full name of a map entry -> it


def type_name(field: descriptor_pb2.FieldDescriptorProto) -> str:
    """The field's type as a link (messages, enums of this package) or a plain name."""
    entry = _MAPS.get(field.type_name)
    if entry is not None:
        key, value = (f.type_name.rsplit(".", 1)[-1] or _SCALARS[f.type] for f in entry.field)
        return f"`map<{key}, {value}>`"
    if field.type_name.startswith(PREFIX):
        name = field.type_name.removeprefix(PREFIX)
        shown = f"[`{name}`]({anchor_page(name)}#{name.lower().replace('.', '')})"
    elif field.type_name:
        shown = f"`{field.type_name.lstrip('.')}`"
    else:
        shown = f"`{_SCALARS[field.type]}`"
    if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
        return f"repeated {shown}"
    return shown


_WHERE: dict[str, str] = {}  # message or enum name -> the page that defines it


def anchor_page(name: str) -> str:
    page = _WHERE.get(name.split(".")[0], "")
    return f"{page}.md" if page else ""


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def message_section(
    msg: descriptor_pb2.DescriptorProto,
    path: tuple[int, ...],
    notes: dict[tuple[int, ...], str],
    prefix: str = "",
) -> list[str]:
    name = f"{prefix}{msg.name}"
    out = [f"### {name}", ""]
    if notes.get(path):
        out += [notes[path], ""]
    if msg.field:
        out += ["| field | number | type | description |", "| --- | --- | --- | --- |"]
        for i, field in enumerate(msg.field):
            note = cell(notes.get((*path, _FIELD, i), ""))
            out.append(f"| `{field.name}` | {field.number} | {type_name(field)} | {note} |")
        out.append("")
    for i, enum in enumerate(msg.enum_type):
        out += enum_section(enum, (*path, _NESTED_ENUM, i), notes, f"{name}.")
    for i, nested in enumerate(msg.nested_type):
        if not nested.options.map_entry:
            out += message_section(nested, (*path, _NESTED, i), notes, f"{name}.")
    return out


def enum_section(
    enum: descriptor_pb2.EnumDescriptorProto,
    path: tuple[int, ...],
    notes: dict[tuple[int, ...], str],
    prefix: str = "",
) -> list[str]:
    out = [f"### {prefix}{enum.name}", ""]
    if notes.get(path):
        out += [notes[path], ""]
    out += ["| value | number | description |", "| --- | --- | --- |"]
    for i, value in enumerate(enum.value):
        note = cell(notes.get((*path, _VALUE, i), ""))
        out.append(f"| `{value.name}` | {value.number} | {note} |")
    return [*out, ""]


def page(proto: descriptor_pb2.FileDescriptorProto) -> str:
    notes = comments(proto)
    stem = Path(proto.name).stem
    out = [f"# {stem}.proto", "", f"Generated from `protos/{proto.name}`.", ""]
    for s, service in enumerate(proto.service):
        out += [f"## {service.name}", ""]
        if notes.get((_SERVICE, s)):
            out += [notes[(_SERVICE, s)], ""]
        out += ["| method | request | response | description |", "| --- | --- | --- | --- |"]
        for m, method in enumerate(service.method):
            request = method.input_type.removeprefix(PREFIX)
            response = method.output_type.removeprefix(PREFIX)
            stream = "stream " if method.server_streaming else ""
            note = cell(notes.get((_SERVICE, s, _METHOD, m), ""))
            out.append(
                f"| `{method.name}` | [`{request}`](#{request.lower()}) "
                f"| {stream}[`{response}`](#{response.lower()}) | {note} |"
            )
        out.append("")
    if proto.message_type:
        out += ["## Messages", ""]
        for i, msg in enumerate(proto.message_type):
            out += message_section(msg, (_MESSAGE, i), notes)
    if proto.enum_type:
        out += ["## Enums", ""]
        for i, enum in enumerate(proto.enum_type):
            out += enum_section(enum, (_ENUM, i), notes)
    return "\n".join(out)


def pages() -> dict[str, str]:
    """``api/<stem>.md`` for every proto of the package, and ``api/index.md``."""
    ours = [p for p in descriptor_set().file if p.name.startswith(PACKAGE + "/")]
    for proto in ours:
        for item in [*proto.message_type, *proto.enum_type]:
            _WHERE[item.name] = Path(proto.name).stem
        for msg in proto.message_type:
            for nested in msg.nested_type:
                if nested.options.map_entry:
                    _MAPS[f"{PREFIX}{msg.name}.{nested.name}"] = nested
    out = {f"api/{Path(p.name).stem}.md": page(p) for p in ours}
    index = [
        "# gRPC API",
        "",
        "Generated from the `.proto` files in `protos/brain/v1` at every build of this site.",
        "Every request carries `Scope scope = 1`; see [Keys, permissions and scope]"
        "(../concepts/keys-and-scope.md).",
        "",
        "| file | services |",
        "| --- | --- |",
    ]
    for proto in ours:
        stem = Path(proto.name).stem
        services = ", ".join(f"`{s.name}`" for s in proto.service) or "(messages only)"
        index.append(f"| [{stem}.proto]({stem}.md) | {services} |")
    out["api/index.md"] = "\n".join(index) + "\n"
    return out


def lay_out_sources() -> None:
    """Lay out the installed package's folders (``brain.clients`` is ``clients/``) where
    mkdocstrings reads the client docstrings from: ``.build/docs-src/brain``. Done when
    this hook is loaded, before any plugin's ``on_config``: mkdocstrings drops a search
    path that does not exist yet, so a first build on a fresh checkout found nothing."""
    brain = ROOT / ".build" / "docs-src" / "brain"
    brain.mkdir(parents=True, exist_ok=True)
    for name, folder in (("clients", "clients"), ("v1", "clients/v1"), ("authz", "authz")):
        link = brain / name
        if not link.is_symlink():
            link.symlink_to(ROOT / folder, target_is_directory=True)
    (brain / "__init__.py").touch()


lay_out_sources()


def on_files(files: Files, config: Any) -> Files:
    for src_uri, content in pages().items():
        files.append(File.generated(config, src_uri, content=content))
    return files


if __name__ == "__main__":  # print the pages, to read them without a build
    for name, text in pages().items():
        sys.stdout.write(f"==> {name}\n{text}\n")
