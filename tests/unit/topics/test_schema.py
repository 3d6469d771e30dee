"""The published contract (docs/contracts/) matches the code, and real encoded events of every
topic, plain and sealed, validate against their topic's published JSON Schema."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from pydantic import SecretStr

import memstream
from memstream.kafka.headers import headers_for
from memstream.security.keys import activate, release
from memstream.security.signing import Signer
from memstream.topics import schema
from memstream.topics.asyncapi import dump_yaml, schema_versions
from memstream.topics.registry import ALL_TOPICS, BY_SUFFIX
from memstream.topics.sealing import (
    ENVELOPE_SCHEMA,
    FIELD_REF_SCHEMA,
    SEALED_KEY,
    sealing_active,
)
from memstream.topics.trust import SigningKey
from tests.unit.topics.samples import samples


@pytest.fixture(scope="module")
def validators() -> dict[str, Draft202012Validator]:
    found = {}
    for spec in ALL_TOPICS:
        path = schema.ROOT / schema.OUT / "schemas" / f"{spec.suffix}.json"
        published = json.loads(path.read_text(encoding="utf-8"))
        Draft202012Validator.check_schema(published)
        found[spec.suffix] = Draft202012Validator(published)
    return found


@pytest.fixture
def sealing(tmp_path: Path) -> Iterator[None]:
    activate(tmp_path)
    try:
        yield
    finally:
        release(tmp_path)


def _errors(validator: Draft202012Validator, data: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(data)]


# ------------------------------------------------------------------ the files are current


def test_the_published_contract_matches_the_models_and_the_registry() -> None:
    lines = schema.stale()
    if lines:
        pytest.fail("the published contract is stale (docs/contracts/); regenerate it with "
                    "`python -m memstream.topics.schema` and commit the result:\n"
                    + "\n".join(lines), pytrace=False)


def test_regeneration_gives_identical_bytes_and_check_names_each_stale_file(
        tmp_path: Path) -> None:
    assert schema.rendered() == schema.rendered()
    page = (schema.ROOT / schema.DOC).read_text(encoding="utf-8")
    assert schema.BEGIN in page and schema.END in page  # the topics table is generated
    (tmp_path / schema.DOC).parent.mkdir(parents=True)
    (tmp_path / schema.DOC).write_text(page.replace("| `conversations`", "| `chats`"))
    assert schema.main(["--root", str(tmp_path)], out=lambda _: None) == 0
    assert (tmp_path / schema.DOC).read_text(encoding="utf-8") == page
    assert schema.write(tmp_path) == []  # a second run changes nothing
    assert schema.main(["--check", "--root", str(tmp_path)], out=lambda _: None) == 0

    (tmp_path / schema.OUT / "schemas" / "memory.items.json").write_text("{}\n")
    (tmp_path / schema.OUT / "schemas" / "gone.json").write_text("{}\n")
    (tmp_path / schema.OUT / "asyncapi.yaml").unlink()
    lines: list[str] = []
    assert schema.main(["--check", "--root", str(tmp_path)], out=lines.append) == 1
    assert len(lines) == 3, lines
    assert all("python -m memstream.topics.schema" in line for line in lines)
    assert any(line.startswith("docs/contracts/schemas/memory.items.json: stale")
               for line in lines)
    assert any(line.startswith("docs/contracts/asyncapi.yaml: missing") for line in lines)
    assert any(line.startswith("docs/contracts/schemas/gone.json: no topic") for line in lines)
    schema.write(tmp_path)
    assert not (tmp_path / schema.OUT / "schemas" / "gone.json").exists()
    assert schema.stale(tmp_path) == []


def test_each_schema_says_what_it_is(validators: dict[str, Draft202012Validator]) -> None:
    for spec in ALL_TOPICS:
        published = validators[spec.suffix].schema
        assert published["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert published["$id"] == f"urn:memstream:topic:{spec.suffix}"
        assert published["title"]
        assert spec.doc.rstrip(".") in published["description"]
        assert published["$defs"]["SealedEnvelope"] == ENVELOPE_SCHEMA
        assert published["$defs"]["SealedRef"] == FIELD_REF_SCHEMA
        assert published["x-memstream"]["schemaVersions"] == schema_versions(spec)
    assert validators["memory.updates"].schema["x-memstream"]["schemaVersions"] == [1, 2, 3]


def test_the_table_of_flows_covers_the_registry() -> None:
    assert set(schema.FLOWS) == set(BY_SUFFIX)
    for suffix, (producers, consumers) in schema.FLOWS.items():
        assert producers and consumers, suffix
        assert set(producers) | set(consumers) <= set(schema.ACTORS), suffix


def test_the_asyncapi_yaml_reads_back_as_the_document() -> None:
    text = (schema.ROOT / schema.OUT / "asyncapi.yaml").read_text(encoding="utf-8")
    document = yaml.safe_load(text)
    assert document == schema.document(schema.ACTORS, schema.FLOWS)
    assert document["info"]["version"] == memstream.__version__
    assert set(document["channels"]) >= {spec.suffix.replace(".", "_").replace("-", "_")
                                         for spec in ALL_TOPICS}


@pytest.mark.parametrize("text", [
    "yes", "No", "null", "~", "true", "1.0", "0x1f", "-1", "a: b", "a #b", "# c", "- d",
    "{e}", "[f]", "*g", "&h", "!i", "%j", "@k", "`l`", "'m'", '"n"', "", " o", "p ",
    "q  r", "é—ü 中文", "line\nline", "line\n", "\nline", " x\ny", "x\n y", "x\t\ny",
    "tab\there", "a\x01b", "$ref", "#/x", "?", ":", "key:", "2025-05-08", "1e3", ".inf",
])
def test_the_yaml_emitter_round_trips(text: str) -> None:
    data = {text: text, "list": [text, {text: [text]}, [], {}], "n": [1, -1, 2.5, True, None]}
    assert yaml.safe_load(dump_yaml(data)) == data


# ------------------------------------------------------------ real events validate


def test_samples_cover_every_topic() -> None:
    assert set(samples()) == set(BY_SUFFIX)


def test_plain_events_validate_against_their_topic_schema(
        validators: dict[str, Draft202012Validator]) -> None:
    assert not sealing_active()
    for suffix, events in samples().items():
        for event in events:
            data = json.loads(BY_SUFFIX[suffix].encode(event))
            assert _errors(validators[suffix], data) == [], (suffix, data)


def test_sealed_events_validate_against_their_topic_schema(
        validators: dict[str, Draft202012Validator], sealing: None) -> None:
    sealed_somewhere = set()
    for suffix, events in samples().items():
        spec = BY_SUFFIX[suffix]
        for event in events:
            raw = spec.encode(event)
            if SEALED_KEY.encode() in raw:
                sealed_somewhere.add(suffix)
            data = json.loads(raw)
            assert _errors(validators[suffix], data) == [], (suffix, data)
            assert spec.decode(raw) == event  # and it opens to the event
    assert b'"zip":"deflate"' in BY_SUFFIX["conversations"].encode(samples()["conversations"][1])
    # every topic whose values hold what a person said seals some of it
    assert sealed_somewhere == set(BY_SUFFIX) - {"reorganize.high", "reorganize.normal",
                                                 "reorganize.low", "cube-views"}


def _first_envelope(data: Any) -> dict[str, Any] | None:
    if isinstance(data, dict):
        if isinstance(data.get(SEALED_KEY), dict):
            return data[SEALED_KEY]
        data = list(data.values())
    if isinstance(data, list):
        for item in data:
            if (found := _first_envelope(item)) is not None:
                return found
    return None


def test_a_record_with_a_wrong_type_does_not_validate(
        validators: dict[str, Draft202012Validator], sealing: None) -> None:
    for suffix, events in samples().items():
        data = json.loads(BY_SUFFIX[suffix].encode(events[0]))
        wrong = {**data, "user_id": 42}
        assert _errors(validators[suffix], wrong), suffix
        assert _errors(validators[suffix], {**data, "occurred_at": ["today"]}), suffix
        assert _errors(validators[suffix], {**data, "unknown_field": 1}), suffix
        envelope = _first_envelope(data)
        if envelope is not None:  # a broken envelope is neither the plain value nor one
            envelope["kid"] = "not hex"
            assert _errors(validators[suffix], data), suffix
    update = json.loads(BY_SUFFIX["memory.updates"].encode(samples()["memory.updates"][0]))
    assert _errors(validators["memory.updates"], {**update, "schema_version": 4})
    bad_node = copy.deepcopy(update)
    bad_node["node"]["metadata"]["confidence"] = "high"
    assert _errors(validators["memory.updates"], bad_node)


def test_real_headers_match_each_message_s_headers_schema() -> None:
    """What ``memstream/kafka/headers.py`` writes (with a signature and a trace context) is
    what asyncapi.yaml says a record of that topic carries."""
    document = yaml.safe_load((schema.ROOT / schema.OUT / "asyncapi.yaml").read_text("utf-8"))
    signer = Signer("chat", SigningKey(id="k1", secret=SecretStr("s" * 32)), 60.0)
    trace = [("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01")]
    for suffix, events in samples().items():
        spec = BY_SUFFIX[suffix]
        pointer = f"#/components/messages/{suffix.replace('.', '_').replace('-', '_')}/headers"
        validator = Draft202012Validator({**document, "$ref": pointer})
        for event in events:
            headers = {k: v.decode() for k, v in
                       headers_for(event, spec.encode(event), signer, trace)}
            assert {"ce_id", "ce_type", "memstream-sig"} <= set(headers)
            assert _errors(validator, headers) == [], (suffix, headers)
            assert _errors(validator, {**headers, "ce_type": "memstream.Other"}), suffix
