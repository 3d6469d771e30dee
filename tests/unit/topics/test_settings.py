"""The settings root (topics/settings.py): providers picked from what is configured, the
environment read as documented."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.topics.settings import Settings


def test_settings_pick_providers_from_what_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().llm.provider == "rules"
    assert Settings().embedder.provider == "local"
    monkeypatch.setenv("MEMSTREAM_LLM__BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEMSTREAM_LLM__API_KEY", "sk-secret")
    monkeypatch.setenv("MEMSTREAM_KAFKA__PARTITIONS", "3")
    s = Settings()
    assert s.llm.provider == "openai"
    assert s.kafka.partitions == 3
    assert "sk-secret" not in repr(s)
    assert s.llm.api_key is not None and s.llm.api_key.get_secret_value() == "sk-secret"


def test_null_in_the_environment_unsets_an_optional_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().worker.blas_threads == 1
    monkeypatch.setenv("MEMSTREAM_WORKER__BLAS_THREADS", "null")
    assert Settings().worker.blas_threads is None
    monkeypatch.setenv("MEMSTREAM_WORKER__BLAS_THREADS", "0")
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Settings()
