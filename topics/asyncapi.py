"""The AsyncAPI 3.0 document of the pipeline, built from the registry and a table of who
produces and consumes each topic (``topics/schema.py`` holds the table and writes the file).

It is written as YAML here, not with PyYAML: the contract is installed by producers without
the dev extra, and the document is plain data (mappings, lists, strings, numbers), so a
small emitter does; the unit test reads it back with PyYAML and compares.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import version as package_version
from typing import Any, Literal, get_args

from pydantic import BaseModel

import memstream.topics.events as events
from memstream.topics.registry import ALL_TOPICS, REPLIES, REQUESTS, TopicSpec
from memstream.topics.settings import KafkaSettings

COMMAND = "python -m memstream.topics.schema"
PREFIX: str = KafkaSettings.model_fields["topic_prefix"].default
PARTITIONS: int = KafkaSettings.model_fields["partitions"].default
KAFKA_BINDING = "0.5.0"
REPLY_TO = "reply_to"  # the channel of a request's reply: the topic its reply_to names

# ------------------------------------------------------------------ what a topic carries


def value_name(spec: TopicSpec) -> str:
    """The value's name: its model's, or the union's in ``topics/events.py`` (``Request``)."""
    if isinstance(spec.value, type):
        return spec.value.__name__
    return next(name for name, obj in vars(events).items() if obj is spec.value)


def value_models(spec: TopicSpec) -> tuple[type[BaseModel], ...]:
    """The models a value of the topic may be: one, or each member of a union."""
    if isinstance(spec.value, type):
        return (spec.value,)
    union = get_args(spec.value)[0]  # Annotated[A | B, Field(discriminator=...)]
    return tuple(get_args(union))


def model_versions(model: type[BaseModel]) -> tuple[int, ...]:
    """The ``schema_version`` values a model reads."""
    return tuple(sorted(get_args(model.model_fields["schema_version"].annotation)))


def schema_versions(spec: TopicSpec) -> list[int]:
    return sorted({v for model in value_models(spec) for v in model_versions(model)})


def ce_types(spec: TopicSpec) -> list[str]:
    """The ``ce_type`` header values of the topic's records (``memstream/kafka/headers.py``):
    one per model and schema version, ``memstream.<Model>.v<n>``."""
    return sorted(f"memstream.{m.__name__}.v{v}"
                  for m in value_models(spec) for v in model_versions(m))


# ------------------------------------------------------------------------------ pieces


@dataclass(frozen=True)
class Actor:
    """Who produces or consumes a topic: an application, a stage, a subscriber."""

    title: str
    group: str | None = None  # the consumer group it reads in, when it is the worker's


Flows = Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]  # suffix: producers, consumers


def channel_id(spec: TopicSpec) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", spec.suffix)


def _ref(*path: str) -> dict[str, str]:
    return {"$ref": "#/" + "/".join(path)}


TEXT = {"type": "string"}
RECORD_HEADERS: dict[str, Any] = {
    "type": "object",
    "description": "Kafka record headers (memstream/kafka/headers.py; UTF-8 values): the "
                   "CloudEvents Kafka binding, binary mode, then the optional trace context "
                   "and signature. A record re-published from its raw bytes (a dead letter "
                   "re-driven) carries content-type, ce_specversion and ce_id only; records "
                   "written before headers existed carry none.",
    "required": ["content-type", "ce_specversion"],
    "properties": {
        "content-type": {"const": "application/json"},
        "ce_specversion": {"const": "1.0"},
        "ce_id": {**TEXT, "description": "the event's event_id: stable across redelivery "
                                         "and replay (deduplicate by it)"},
        "ce_type": {**TEXT, "pattern": "^memstream\\.[A-Za-z]+\\.v[0-9]+$",
                    "description": "the schema's name and version: "
                                   "memstream.<model>.v<schema_version>"},
        "ce_source": {"const": "memstream"},
        "traceparent": {**TEXT, "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
                        "description": "W3C trace context of the span that produced it "
                                       "(docs/tracing.md)"},
        "tracestate": {**TEXT, "description": "W3C trace state, with traceparent"},
        "memstream-sig": {**TEXT, "pattern": "^v1;[^;]+;[^;]+;[0-9]+;[A-Za-z0-9_-]+$",
                          "description": "v1;<application>;<key id>;<expires, epoch s>;"
                                         "<HMAC-SHA256, base64url>: when the producer signs "
                                         "(docs/trust.md)"},
    },
}


def message(spec: TopicSpec) -> dict[str, Any]:
    name = value_name(spec)
    found: dict[str, Any] = {
        "name": name,
        "title": f"{name} on {PREFIX}{spec.suffix}",
        "summary": spec.doc or name,
        "contentType": "application/json",
        "headers": {"type": "object", "allOf": [
            _ref("components", "schemas", "RecordHeaders"),
            {"properties": {"ce_type": {"enum": ce_types(spec)}}},
        ]},
        # The files are JSON Schema 2020-12; the keywords they use read the same in draft-07,
        # the newest JSON Schema the AsyncAPI tools know (prefixItems is ignored there).
        "payload": {"schemaFormat": "application/schema+json;version=draft-07",
                    "schema": {"$ref": f"./schemas/{spec.suffix}.json"}},
        "bindings": {"kafka": {"key": {"type": "string", "description": f"{spec.key} (UTF-8)"},
                               "bindingVersion": KAFKA_BINDING}},
    }
    if spec in (REQUESTS, REPLIES):
        found["correlationId"] = _ref("components", "correlationIds", "correlation_id")
    return found


def channel(spec: TopicSpec) -> dict[str, Any]:
    cid = channel_id(spec)
    config: dict[str, Any] = {"cleanup.policy": ["compact" if spec.compacted else "delete"]}
    if spec.retention_ms is not None:
        config["retention.ms"] = spec.retention_ms
    return {
        "address": f"{PREFIX}{spec.suffix}",
        "title": spec.suffix,
        "description": f"{spec.doc or value_name(spec)}\n\nThe address is the topic prefix "
                       f"(setting kafka.topic_prefix, MEMSTREAM_KAFKA__TOPIC_PREFIX, default "
                       f"{PREFIX}) then {spec.suffix}. Schema: schemas/{spec.suffix}.json.",
        "messages": {cid: _ref("components", "messages", cid)},
        "bindings": {"kafka": {"topic": f"{PREFIX}{spec.suffix}",
                               "partitions": spec.partitions or PARTITIONS,
                               "topicConfiguration": config,
                               "bindingVersion": KAFKA_BINDING}},
    }


def _reply() -> dict[str, Any]:
    """Where a request's reply goes: the topic its ``reply_to`` names, the partition its
    ``reply_partition`` names; matched to the request by ``correlation_id``."""
    return {
        "address": {"location": "$message.payload#/reply_to",
                    "description": "the request's reply_to: a full topic name (default "
                                   f"{PREFIX}{REPLIES.suffix}); the reply goes to the "
                                   "partition its reply_partition names"},
        "channel": _ref("channels", REPLY_TO),
        "messages": [_ref("channels", REPLY_TO, "messages", channel_id(REPLIES))],
    }


def operation(spec: TopicSpec, name: str, actor: Actor,
              action: Literal["send", "receive"]) -> dict[str, Any]:
    cid = channel_id(spec)
    sends = action == "send"
    found: dict[str, Any] = {
        "action": action,
        "channel": _ref("channels", cid),
        "title": f"{spec.suffix}, {'from' if sends else 'to'} {name}",
        "summary": f"{'Publishes to' if sends else 'Consumes'} {PREFIX}{spec.suffix}",
        "description": f"{actor.title}.",
        "tags": [{"name": name}],
        "messages": [_ref("channels", cid, "messages", cid)],
    }
    if action == "receive" and actor.group is not None:
        found["bindings"] = {"kafka": {"groupId": {
            "type": "string", "default": actor.group,
            "description": "its consumer group (named after the setting app_id)"},
            "bindingVersion": KAFKA_BINDING}}
    if spec is REQUESTS:
        found["reply"] = _reply()
    return found


def document(actors: Mapping[str, Actor], flows: Flows) -> dict[str, Any]:
    """The AsyncAPI 3.0 document: every topic a channel, each producer and consumer an
    operation, requests answered on the topic their ``reply_to`` names."""
    channels: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for spec in ALL_TOPICS:
        cid = channel_id(spec)
        channels[cid], messages[cid] = channel(spec), message(spec)
        producers, consumers = flows[spec.suffix]
        for name in producers:
            operations[f"{name}_send_{cid}"] = operation(spec, name, actors[name], "send")
        for name in consumers:
            operations[f"{name}_receive_{cid}"] = operation(spec, name, actors[name], "receive")
    reply_id = channel_id(REPLIES)
    channels[REPLY_TO] = {
        "address": None,  # known at runtime only: the request's reply_to
        "title": "reply_to",
        "description": "The topic a request names in reply_to (default "
                       f"{PREFIX}{REPLIES.suffix}), read by its requester.",
        "messages": {reply_id: _ref("components", "messages", reply_id)},
    }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "memstream",
            "version": package_version("memstream"),
            "description": "Long-term memory for LLM agents as a Kafka event-streaming "
                           "pipeline. A value is its event's JSON (schemas/<topic>.json); "
                           "the fields that hold what a person said are sealed per cube when "
                           "erasure is on. See docs/contracts.md.",
            "license": {"name": "Apache-2.0",
                        "url": "https://www.apache.org/licenses/LICENSE-2.0"},
        },
        "defaultContentType": "application/json",
        "servers": {"kafka": {
            "host": "{bootstrap}", "protocol": "kafka",
            "description": "Any Kafka cluster (setting kafka.bootstrap_servers), or the "
                           "embedded broker that `memstream up` starts.",
            "variables": {"bootstrap": {"default": "localhost:9092",
                                        "description": "host:port of a broker"}},
        }},
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": {"RecordHeaders": RECORD_HEADERS},
            "messages": messages,
            "correlationIds": {"correlation_id": {
                "location": "$message.payload#/correlation_id",
                "description": "A request's correlation_id, repeated on its reply.",
            }},
        },
    }


# -------------------------------------------------------------------------------- YAML

_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}
_PLAIN = re.compile(r"[A-Za-z$][A-Za-z0-9_ ./()$-]*[A-Za-z0-9_./)]|[A-Za-z]")
# a literal block keeps text as it is, but not a leading space, trailing blanks or controls
_UNSAFE_BLOCK = re.compile(r"\A\n|\n\Z|^ |[ \t]$|[\x00-\x09\x0b-\x1f\x7f]", re.MULTILINE)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED and "  " not in text:
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted one


def _block(value: Mapping[str, Any] | list[Any], indent: int) -> Iterable[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _entry(f"{pad}{_scalar(str(key))}:", item, indent)
        return
    for item in value:
        if isinstance(item, Mapping) and item:
            lines = list(_block(item, indent + 2))
            yield f"{pad}- {lines[0].lstrip()}"
            yield from lines[1:]
        else:
            yield from _entry(f"{pad}-", item, indent)


def _entry(head: str, item: Any, indent: int) -> Iterable[str]:
    if isinstance(item, Mapping | list) and item:
        yield head
        yield from _block(item, indent + 2)
    elif isinstance(item, Mapping | list):
        yield f"{head} {'{}' if isinstance(item, Mapping) else '[]'}"
    elif isinstance(item, str) and "\n" in item and not _UNSAFE_BLOCK.search(item):
        yield f"{head} |-"  # a literal block: the text as it is, line by line
        yield from (f"{' ' * (indent + 2)}{line}" if line else "" for line in item.split("\n"))
    else:
        yield f"{head} {_scalar(item)}"


def dump_yaml(data: Mapping[str, Any]) -> str:
    """Block-style YAML of plain data, in the mapping's own order."""
    return "\n".join(_block(data, 0)) + "\n"
