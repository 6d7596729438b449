"""docs/reference/api.md: the gRPC API from ``protos/shardcron/v1/*.proto`` and their comments.

protoc (grpcio-tools, the version ``make proto`` uses) compiles the protos into a descriptor set with
source info, so each service, method, message, field, enum and value comes with the comments written
above it and after it, exactly as the .proto has them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

from shardcron.dev.docs_reference.markdown import code, table

PROTOS = Path(__file__).resolve().parents[3] / "protos"
# Where each kind of declaration sits in a descriptor (descriptor.proto's field numbers), for source paths.
FILE_MESSAGE, FILE_ENUM, FILE_SERVICE, FILE_SYNTAX = 4, 5, 6, 12
MESSAGE_FIELD, MESSAGE_NESTED = 2, 3
ENUM_VALUE, SERVICE_METHOD = 2, 2
F = descriptor_pb2.FieldDescriptorProto


def descriptors() -> list[descriptor_pb2.FileDescriptorProto]:
    """Every .proto under protos/, compiled with its comments."""
    files = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        status = protoc.main(["protoc", f"-I{PROTOS}", "--include_source_info", f"--descriptor_set_out={out}", *files])
        if status != 0:
            raise RuntimeError(f"protoc failed on {files} with status {status}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return list(fds.file)


class Comments:
    """The comments of one file's declarations, by their source path."""

    def __init__(self, fd: descriptor_pb2.FileDescriptorProto):
        # One line each; "<" escaped, so "<prefix>/config" shows as written rather than as an HTML tag.
        self._by_path = {
            tuple(loc.path): " ".join((loc.leading_comments + " " + loc.trailing_comments).split()).replace("<", "&lt;")
            for loc in fd.source_code_info.location
        }

    def __call__(self, *path: int) -> str:
        return self._by_path.get(path, "")


def _short(type_name: str, package: str) -> str:
    return type_name.removeprefix(f".{package}.")


def _type(field: F, package: str, maps: dict[str, descriptor_pb2.DescriptorProto]) -> str:
    if field.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
        name = _short(field.type_name, package)
        entry = maps.get(field.type_name)
        if entry is not None:
            key, value = (_plain(f, package) for f in entry.field)
            return code(f"map<{key}, {value}>")
        return f"[{name}](#{name.lower()})"
    return code(_plain(field, package))


def _plain(field: F, package: str) -> str:
    if field.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
        return _short(field.type_name, package)
    return F.Type.Name(field.type).removeprefix("TYPE_").lower()


def _label(field: F, oneofs: list[str], maps: dict[str, descriptor_pb2.DescriptorProto]) -> str:
    if field.label == F.LABEL_REPEATED and field.type_name not in maps:
        return "repeated"
    if field.proto3_optional:
        return "optional"
    if field.HasField("oneof_index"):
        return f"oneof {code(oneofs[field.oneof_index])}"
    return ""


def _maps(fd: descriptor_pb2.FileDescriptorProto) -> dict[str, descriptor_pb2.DescriptorProto]:
    out = {}
    for message in fd.message_type:
        for nested in message.nested_type:
            if nested.options.map_entry:
                out[f".{fd.package}.{message.name}.{nested.name}"] = nested
    return out


def _file(fd: descriptor_pb2.FileDescriptorProto) -> str:
    said = Comments(fd)
    maps = _maps(fd)
    pkg = fd.package
    out = [f"From `protos/{fd.name}`, package `{pkg}`. {said(FILE_SYNTAX)}\n"]
    for s, service in enumerate(fd.service):
        out.append(f"### Service `{pkg}.{service.name}`\n")
        if said(FILE_SERVICE, s):
            out.append(said(FILE_SERVICE, s) + "\n")
        rows = []
        for m, method in enumerate(service.method):
            request, response = _short(method.input_type, pkg), _short(method.output_type, pkg)
            streams = "stream " if method.server_streaming else ""
            rows.append(
                [
                    code(method.name),
                    f"[{request}](#{request.lower()})",
                    f"{streams}[{response}](#{response.lower()})",
                    said(FILE_SERVICE, s, SERVICE_METHOD, m),
                ]
            )
        out.append(table(["RPC", "request", "answer", "what it does"], rows))
    out.append("### Messages\n")
    for i, message in enumerate(fd.message_type):
        out.append(f"#### {message.name}\n")
        if said(FILE_MESSAGE, i):
            out.append(said(FILE_MESSAGE, i) + "\n")
        oneofs = [o.name for o in message.oneof_decl]
        rows = [
            [
                code(field.name),
                str(field.number),
                " ".join(x for x in (_label(field, oneofs, maps), _type(field, pkg, maps)) if x),
                said(FILE_MESSAGE, i, MESSAGE_FIELD, f),
            ]
            for f, field in enumerate(message.field)
        ]
        if rows:
            out.append(table(["field", "number", "type", "meaning"], rows))
        else:
            out.append("No fields.\n")
    out.append("### Enums\n")
    for e, enum in enumerate(fd.enum_type):
        out.append(f"#### {enum.name}\n")
        if said(FILE_ENUM, e):
            out.append(said(FILE_ENUM, e) + "\n")
        rows = [[code(v.name), str(v.number), said(FILE_ENUM, e, ENUM_VALUE, n)] for n, v in enumerate(enum.value)]
        out.append(table(["value", "number", "meaning"], rows))
    return "\n".join(out)


def render() -> str:
    return "\n".join(_file(fd) for fd in descriptors())


__all__ = ["descriptors", "render"]
