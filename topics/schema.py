"""The published contract, generated from the models and the registry: a JSON Schema per topic
(``docs/contracts/schemas/<suffix>.json``) and an AsyncAPI 3.0 document of the whole pipeline
(``docs/contracts/asyncapi.yaml``), so a client in any language can read and write the topics.

``python -m memstream.topics.schema`` writes them; ``--check`` writes nothing and exits 1,
one line per stale file, when a model or the registry changed and they were not regenerated
(``tests/unit/topics/test_schema.py`` runs the same check). The output is deterministic
(sorted keys, fixed formatting), so regenerating gives identical bytes.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonRef, JsonSchemaMode, JsonSchemaValue
from pydantic_core import CoreSchema

from memstream.topics.asyncapi import (
    COMMAND,
    PREFIX,
    Actor,
    Flows,
    ce_types,
    document,
    dump_yaml,
    schema_versions,
    value_name,
)
from memstream.topics.registry import ALL_TOPICS, KEEP_FOREVER, TopicSpec
from memstream.topics.sealing import ENVELOPE_SCHEMA, FIELD_REF_SCHEMA, SEALED_KEY
from memstream.topics.settings import Settings

ROOT = Path(__file__).resolve().parents[1]  # the repository (topics/ is linked under memstream/)
OUT = Path("docs") / "contracts"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
SEALED_REF = "#/$defs/SealedRef"
# Only while pydantic builds a schema: it resolves every local "$ref" against the definitions
# it made itself and rejects any other, but leaves absolute URLs alone.
_SEALED_PLACEHOLDER = "https://memstream.invalid/SealedRef"
APP_ID: str = Settings.model_fields["app_id"].default

# --------------------------------------------------------------------------- who does what

ACTORS: dict[str, Actor] = {
    "applications": Actor("Applications: memstream's client, CLI, MCP server and LangGraph "
                          "store, or any Kafka client speaking this contract"),
    "operators": Actor("Operators: the CLI's administration commands, or any Kafka client"),
    "subscribers": Actor("Subscribers: client.updates() and history, the UI, MCP resources, "
                         "or any Kafka consumer"),
    "extraction": Actor("The extraction stage (streams/extraction)", APP_ID),
    "memory_add": Actor("The add/merge stage (streams/memory)", APP_ID),
    "commands": Actor("The command stage (streams/commands)", APP_ID),
    "optimizer": Actor("The optimizer (streams/reorganize)", APP_ID),
    "scheduler": Actor("The scheduler's dispatchers (streams/scheduler)", APP_ID),
    "working_memory_sink": Actor("The working-memory sink (streams/scheduler)", APP_ID),
    "search": Actor("The search and query lane (streams/search)", f"{APP_ID}-requests"),
    "lifecycle": Actor("The lifecycle timer (streams/lifecycle): a sweep command per cube"),
    "replay": Actor("Replay (streams/replay): reads a cube's records back, in no group"),
    "provenance": Actor("The provenance index (streams/provenance): where each cube's "
                        "records sit in the log", f"{APP_ID}-provenance"),
    "views": Actor("Every worker's view map (streams/runtime/views.py)"),
    "stages": Actor("Every stage of the worker, with an event it could not process"),
}

# Who produces and who consumes each topic: suffix -> (producers, consumers). The unit test
# checks that it covers the registry and names only the actors above.
FLOWS: Flows = {
    "conversations": (("applications",), ("extraction", "provenance", "replay")),
    "memory.items": (("extraction", "applications", "replay"),
                     ("memory_add", "provenance", "replay")),
    "memory.commands": (("applications", "operators", "lifecycle"),
                        ("commands", "provenance", "replay")),
    "memory.updates": (("memory_add", "commands", "optimizer", "scheduler",
                        "working_memory_sink", "replay"), ("subscribers", "provenance")),
    "reorganize.high": (("memory_add", "commands"), ("optimizer", "provenance")),
    "reorganize.normal": (("operators",), ("optimizer", "provenance")),
    "reorganize.low": (("operators",), ("optimizer", "provenance")),
    "schedule.query": (("applications",), ("scheduler",)),
    "schedule.answer": (("applications",), ("scheduler",)),
    "schedule.add": (("applications",), ("scheduler", "provenance")),
    "working-memory": (("scheduler",),
                       ("working_memory_sink", "subscribers", "provenance", "replay")),
    "activation-memory": (("scheduler",), ("subscribers",)),
    "requests": (("applications",), ("search",)),
    "replies": (("search",), ("applications",)),
    "dead-letter": (("stages",), ("operators",)),
    "cube-views": (("commands",), ("views",)),
}

# --------------------------------------------------------------------------- JSON Schema


def _swap_refs(node: Any, old: str, new: str) -> None:
    if isinstance(node, dict):
        if node.get("$ref") == old:
            node["$ref"] = new
        for value in node.values():
            _swap_refs(value, old, new)
    elif isinstance(node, list):
        for value in node:
            _swap_refs(value, old, new)


def _ref_sealed(node: Any) -> None:
    """Each inline sealed-field reference schema replaced by ``$ref`` to ``$defs/SealedRef``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if value == FIELD_REF_SCHEMA:
                node[key] = {"$ref": SEALED_REF}
            else:
                _ref_sealed(value)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if value == FIELD_REF_SCHEMA:
                node[i] = {"$ref": SEALED_REF}
            else:
                _ref_sealed(value)


class ContractJsonSchema(GenerateJsonSchema):
    """pydantic's generator, knowing ``$defs/SealedRef``: a field marked ``Sealed`` admits
    a reference into the record's envelope (``anyOf: [plain, {"$ref": "#/$defs/SealedRef"}]``),
    which pydantic's own
    generator cannot resolve. Use it for any model with sealed fields:
    ``Model.model_json_schema(schema_generator=ContractJsonSchema)``."""

    def get_json_ref_counts(self, json_schema: JsonSchemaValue) -> dict[JsonRef, int]:
        _swap_refs(json_schema, SEALED_REF, _SEALED_PLACEHOLDER)  # before pydantic follows refs
        _swap_refs(self.definitions, SEALED_REF, _SEALED_PLACEHOLDER)
        return super().get_json_ref_counts(json_schema)

    def generate(self, schema: CoreSchema, mode: JsonSchemaMode = "validation"
                 ) -> JsonSchemaValue:
        result = super().generate(schema, mode)
        if _SEALED_PLACEHOLDER in json.dumps(result):
            _swap_refs(result, _SEALED_PLACEHOLDER, SEALED_REF)
            result.setdefault("$defs", {})["SealedRef"] = copy.deepcopy(FIELD_REF_SCHEMA)
        return result


def topic_schema(spec: TopicSpec) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the topic's values as written, sealed or plain."""
    generated = spec.adapter.json_schema(schema_generator=ContractJsonSchema)
    name = value_name(spec)
    own = generated.pop("description", "")
    description = f"{spec.doc.rstrip('.')}. " if spec.doc else ""
    description += f"Topic {PREFIX}{spec.suffix}, Kafka key: {spec.key}."
    if own:
        description += f"\n\n{name}: {own}"
    _ref_sealed(generated)
    defs = generated.setdefault("$defs", {})
    defs["SealedRef"] = copy.deepcopy(FIELD_REF_SCHEMA)
    defs["SealedEnvelope"] = copy.deepcopy(ENVELOPE_SCHEMA)
    for node in [generated, *defs.values()]:  # an event may carry its sealed values
        props = node.get("properties")
        if isinstance(props, dict) and "event_id" in props and "cube_id" in props:
            props[SEALED_KEY] = {"$ref": "#/$defs/SealedEnvelope"}
    return {
        **generated,
        "$schema": DIALECT,
        "$id": f"urn:memstream:topic:{spec.suffix}",
        "title": name,
        "description": description,
        "x-memstream": {
            "topic": spec.suffix,
            "address": f"{PREFIX}{spec.suffix}",
            "key": spec.key,
            "schemaVersions": schema_versions(spec),
            "ceTypes": ce_types(spec),
        },
    }


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# ------------------------------------------------------------- the table in contracts.md

DOC = Path("docs") / "contracts.md"
BEGIN = f"<!-- the topics: generated by `{COMMAND}` from the registry; do not edit -->"
END = "<!-- end of the generated topics -->"


def _kept(spec: TopicSpec) -> str:
    if spec.compacted:
        return "compacted"
    if spec.retention_ms is None:
        return "broker default"
    if spec.retention_ms == KEEP_FOREVER:
        return "forever"
    return f"{spec.retention_ms // 60_000} min"


def topics_table() -> str:
    """Which topic carries what: the registry and the table of flows, as Markdown."""
    rows = ["| topic | value (schema versions) | what | key | kept | produced by | consumed by |",
            "|---|---|---|---|---|---|---|"]
    for spec in ALL_TOPICS:
        producers, consumers = FLOWS[spec.suffix]
        versions = ", ".join(f"v{v}" for v in schema_versions(spec))
        rows.append(f"| [`{spec.suffix}`](contracts/schemas/{spec.suffix}.json) "
                    f"| `{value_name(spec)}` ({versions}) | {spec.doc.replace('|', '/')} "
                    f"| {spec.key} | {_kept(spec)} | {', '.join(producers)} "
                    f"| {', '.join(consumers)} |")
    return "\n".join(rows)


def with_table(text: str) -> str:
    """``docs/contracts.md`` with the table between its markers made anew."""
    head, found, rest = text.partition(BEGIN + "\n")
    _, end, tail = rest.partition(END)
    if not found or not end:
        return text
    return f"{head}{BEGIN}\n{topics_table()}\n{END}{tail}"


# --------------------------------------------------------------------------- the files


def rendered(root: Path = ROOT) -> dict[Path, str]:
    """Every published file (relative to the repository) and its text; the topics table of
    ``docs/contracts.md`` when the repository has that page."""
    files = {OUT / "schemas" / f"{spec.suffix}.json": dump_json(topic_schema(spec))
             for spec in ALL_TOPICS}
    header = (f"# Generated by `{COMMAND}` from topics/registry.py, the event models and the "
              "table in topics/schema.py: do not edit.\n")
    files[OUT / "asyncapi.yaml"] = header + dump_yaml(document(ACTORS, FLOWS))
    if (root / DOC).exists():
        files[DOC] = with_table((root / DOC).read_text(encoding="utf-8"))
    return files


def _extra(root: Path, files: Mapping[Path, str]) -> list[Path]:
    """Schema files of topics the registry no longer has."""
    return sorted(p.relative_to(root) for p in (root / OUT / "schemas").glob("*.json")
                  if p.relative_to(root) not in files)


def stale(root: Path = ROOT) -> list[str]:
    """One line per published file that differs from what the code generates."""
    files, lines = rendered(root), []
    for path, text in files.items():
        target = root / path
        if not target.exists():
            lines.append(f"{path}: missing; run `{COMMAND}`")
        elif target.read_text(encoding="utf-8") != text:
            lines.append(f"{path}: stale (a model or the registry changed); run `{COMMAND}`")
    lines += [f"{path}: no topic has this schema any more; run `{COMMAND}` (it deletes it)"
              for path in _extra(root, files)]
    return lines


def write(root: Path = ROOT) -> list[Path]:
    """Write every published file; returns those that changed or were deleted."""
    files, changed = rendered(root), []
    for path, text in files.items():
        target = root / path
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            changed.append(path)
    for path in _extra(root, files):
        (root / path).unlink()
        changed.append(path)
    return changed


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Write (or check) the "
                                     "published contract: docs/contracts/.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each stale file")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the repository (default: the one this module is in)")
    args = parser.parse_args(argv)
    if args.check:
        lines = stale(args.root)
        for line in lines:
            out(line)
        return 1 if lines else 0
    changed = write(args.root)
    for path in changed:
        out(f"wrote {path}")
    out(f"{OUT}: {len(changed)} file(s) changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
