"""reference/api.md: the REST API, from the OpenAPI document the platform serves.

The document is drf-spectacular's, made by the same generator and settings as
`GET /openapi.json` (SPECTACULAR_SETTINGS, core/api/openapi.py's hooks), with no
request and no database. Every path and method is rendered: its description,
parameters, request body fields and response codes; then every schema they name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reference_pages.markdown import GENERATED_NOTE, code, inline, paragraphs, slug, table

METHODS = ("get", "post", "put", "patch", "delete")


def openapi_document() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    # public=True: every endpoint, as the served document (which needs no token) has it.
    schema: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return schema


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _schema_link(name: str) -> str:
    return f"{{ref}}`{name} <{_label(name)}>`"


def _label(name: str) -> str:
    return f"api-schema-{slug(name)}"


def type_text(schema: dict[str, Any] | None) -> str:
    """A schema as a short type, schemas it names linked to their section."""
    if not schema:
        return "any"
    if "$ref" in schema:
        text = _schema_link(_ref_name(schema["$ref"]))
    elif "allOf" in schema and len(schema["allOf"]) == 1:
        text = type_text(schema["allOf"][0])
    elif "oneOf" in schema or "anyOf" in schema:
        text = " or ".join(type_text(s) for s in schema.get("oneOf") or schema["anyOf"])
    elif schema.get("type") == "array":
        text = f"array of {type_text(schema.get('items'))}"
    elif "enum" in schema:
        values = [v for v in schema["enum"] if v is not None]
        text = f"{schema.get('type', 'string')}: " + ", ".join(code(v) for v in values)
    else:
        text = schema.get("type", "object")
        if schema.get("format"):
            text += f" ({schema['format']})"
        extra = schema.get("additionalProperties")
        if text == "object" and isinstance(extra, dict) and extra:
            text = f"object of {type_text(extra)}"
    if schema.get("nullable"):
        text += ", or null"
    return text


def _constraints(schema: dict[str, Any]) -> str:
    words = []
    for key, word in (
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minimum", "min"),
        ("maximum", "max"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
        ("pattern", "pattern"),
    ):
        if key in schema:
            value = schema[key]
            words.append(f"{word} {code(value) if key == 'pattern' else value}")
    if "default" in schema:
        words.append(f"default {code(json.dumps(schema['default']))}")
    if schema.get("readOnly"):
        words.append("read-only")
    if schema.get("writeOnly"):
        words.append("write-only")
    return "; ".join(words)


def _describe(schema: dict[str, Any]) -> str:
    text = inline(schema.get("description"))
    more = _constraints(schema)
    return f"{text} ({more})" if text and more else text or more


def _inline_object(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The inline (not named) object a field holds, directly or as array items."""
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        schema = schema["items"]
    if "$ref" not in schema and schema.get("properties"):
        return schema
    return None


def field_rows(schema: dict[str, Any], prefix: str = "", depth: int = 0) -> list[list[str]]:
    """One row per property: inline objects' properties follow as `field.sub`."""
    rows = []
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        rows.append(
            [
                code(prefix + name),
                type_text(prop),
                "yes" if name in required else "",
                _describe(prop),
            ]
        )
        nested = _inline_object(prop)
        if nested is not None and depth < 3:
            marker = "[]." if prop.get("type") == "array" else "."
            rows += field_rows(nested, f"{prefix}{name}{marker}", depth + 1)
    return rows


FIELD_HEADERS = ("field", "type", "required", "description")


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        resolved: dict[str, Any] = document["components"]["schemas"][_ref_name(schema["$ref"])]
        return resolved
    return schema


def _group(path: str) -> str:
    # /v1/schedules/{id}:pause → schedules: one section per resource.
    parts = path.strip("/").split("/")
    return (parts[1] if len(parts) > 1 else parts[0]).split(":")[0]


def operation_markdown(document: dict[str, Any], path: str, method: str, op: dict[str, Any]) -> str:
    out = [f"### {method.upper()} {path}\n"]
    if op.get("summary"):
        out.append(f"{inline(op['summary'])}\n")
    if op.get("description"):
        out.append(paragraphs(op["description"]) + "\n")
    if op.get("deprecated"):
        out.append("*Deprecated.*\n")
    security = op.get("security")
    if security is not None:
        names = sorted({name for requirement in security for name in requirement})
        out.append(
            "Authentication: " + (", ".join(code(n) for n in names) if names else "none") + ".\n"
        )
    params = op.get("parameters", [])
    if params:
        rows = [
            [
                code(p["name"]),
                p["in"],
                type_text(p.get("schema")),
                "yes" if p.get("required") else "",
                _describe({**p.get("schema", {}), "description": p.get("description")}),
            ]
            for p in params
        ]
        out.append("**Parameters**\n")
        out.append(table(("name", "in", "type", "required", "description"), rows))
    body = op.get("requestBody")
    if body:
        for content_type, media in body.get("content", {}).items():
            schema = media.get("schema", {})
            required = " (required)" if body.get("required") else ""
            out.append(f"**Request body**{required}: {code(content_type)}, {type_text(schema)}\n")
            target = _resolve(document, schema)
            rows = field_rows(target)
            if rows:
                out.append(table(FIELD_HEADERS, rows))
    responses = op.get("responses", {})
    rows = []
    for status, answer in sorted(responses.items()):
        content = answer.get("content", {})
        body_text = "; ".join(
            f"{code(ct)} {type_text(media.get('schema'))}" for ct, media in content.items()
        )
        headers = ", ".join(code(h) for h in answer.get("headers", {}))
        description = inline(answer.get("description"))
        if headers:
            description = f"{description} (headers: {headers})" if description else headers
        rows.append([code(status), description, body_text])
    out.append("**Responses**\n")
    out.append(table(("status", "meaning", "body"), rows))
    return "\n".join(out)


def schema_markdown(name: str, schema: dict[str, Any]) -> str:
    out = [f"({_label(name)})=", f"### {name}\n"]
    if schema.get("description"):
        out.append(paragraphs(schema["description"]) + "\n")
    if "enum" in schema:
        out.append(f"One of: {', '.join(code(v) for v in schema['enum'] if v is not None)}.\n")
    elif schema.get("properties"):
        out.append(table(FIELD_HEADERS, field_rows(schema)))
    else:
        out.append(f"Type: {type_text(schema)}.\n")
    return "\n".join(out)


def render(document: dict[str, Any], json_download: str) -> str:
    info = document["info"]
    out = [
        GENERATED_NOTE,
        "# REST API\n",
        f"{inline(info['title'])}, version {code(info['version'])}: every endpoint of the "
        "OpenAPI document the platform serves at `GET /openapi.json` (browsable at "
        "`/v1/docs`), rendered from the code at every docs build. "
        f"The document itself: {{download}}`openapi.json <{json_download}>`.\n",
        paragraphs(info.get("description")) + "\n",
    ]
    schemes = document.get("components", {}).get("securitySchemes", {})
    if schemes:
        out.append("## Authentication\n")
        rows = [
            [
                code(name),
                inline(" ".join(str(s.get(k, "")) for k in ("type", "scheme", "in", "name"))),
                inline(s.get("description")),
            ]
            for name, s in schemes.items()
        ]
        out.append(table(("scheme", "how", "description"), rows))

    by_group: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in document["paths"].items():
        for method in METHODS:
            if method in operations:
                by_group.setdefault(_group(path), []).append((path, method, operations[method]))
    for group in sorted(by_group):
        out.append(f"## {group.replace('-', ' ').capitalize()}\n")
        out += [operation_markdown(document, *item) for item in by_group[group]]

    out.append("## Schemas\n")
    out.append("The request and response bodies the endpoints above name.\n")
    for name, schema in sorted(document.get("components", {}).get("schemas", {}).items()):
        out.append(schema_markdown(name, schema))
    return "\n".join(out)


def write(docs: Path, generated: Path) -> str:
    """The page's Markdown; the document itself is written beside it for download."""
    document = openapi_document()
    generated.mkdir(parents=True, exist_ok=True)
    target = generated / "openapi.json"
    text = json.dumps(document, indent=2, sort_keys=False, default=str) + "\n"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    return render(document, target.relative_to(docs / "reference").as_posix())
