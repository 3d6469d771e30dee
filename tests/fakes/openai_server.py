"""A scripted OpenAI-compatible HTTP server on loopback, for tests of LLM-driven stages.

It is a real HTTP endpoint (aiohttp), so the production ``openai`` client path
runs unchanged: timeouts, HTTP errors and malformed answers are exercised for
real. Tests script it per request:

    server.enqueue(Reply.json({...}))                       # next chat request, FIFO
    server.route("You keep the long-term memory", {...})    # system prompt contains the text
    server.handler = lambda request: Reply(content="...")   # anything else
    server.chat_requests[0]["response_format"]              # what the client sent

Resolution order per chat request: the queue, then routes (first match; a
route can be limited to ``times`` uses), then ``handler``, else HTTP 500 with
"no scripted reply" (and the request is listed in ``unmatched``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web

from memstream.topics.settings import EmbedderSettings, LLMSettings

RequestJSON = dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """One scripted answer: content text, or an HTTP error; optionally after a delay."""

    content: str | None = None
    status: int = 200
    error: str = "scripted error"
    delay_s: float = 0.0
    prompt_tokens: int = 11
    completion_tokens: int = 7
    finish_reason: str = "stop"
    headers: tuple[tuple[str, str], ...] = ()  # e.g. (("Retry-After", "1"),) on a 429

    @classmethod
    def json(cls, value: Any, **kw: Any) -> Reply:
        return cls(content=json.dumps(value, ensure_ascii=False), **kw)

    @classmethod
    def text(cls, content: str, **kw: Any) -> Reply:
        return cls(content=content, **kw)

    @classmethod
    def http_error(cls, status: int, message: str = "scripted error", **kw: Any) -> Reply:
        return cls(status=status, error=message, **kw)

    @classmethod
    def slow(cls, delay_s: float, value: Any = None, **kw: Any) -> Reply:
        content = value if isinstance(value, str) or value is None else json.dumps(value)
        return cls(content=content, delay_s=delay_s, **kw)


# What a script may return: a Reply, content text, a JSON-able dict/list (sent as JSON text).
Scripted = Reply | str | dict[str, Any] | list[Any]
Script = Scripted | Callable[[RequestJSON], Scripted]


@dataclass
class Route:
    match: str
    reply: Script
    where: str = "system"  # "system": the system prompt; "any": any message; "last": last message
    times: int | None = None
    hits: int = 0

    def matches(self, request: RequestJSON) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        messages = request.get("messages") or []
        if self.where == "system":
            texts = [m.get("content") or "" for m in messages if m.get("role") == "system"]
        elif self.where == "last":
            texts = [messages[-1].get("content") or ""] if messages else []
        else:
            texts = [m.get("content") or "" for m in messages]
        return any(self.match in str(t) for t in texts)


@dataclass
class RecordedRequest:
    path: str
    body: RequestJSON
    at: float = field(default_factory=time.monotonic)


def system_prompt(request: RequestJSON) -> str:
    """The system message of a recorded chat request ("" if none)."""
    for message in request.get("messages") or []:
        if message.get("role") == "system":
            return str(message.get("content") or "")
    return ""


def last_user_message(request: RequestJSON) -> str:
    for message in reversed(request.get("messages") or []):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


def hashed_embedding(text: str, dim: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Deterministic bag-of-words vector: texts sharing words (or CJK characters) are close."""
    vector = np.zeros(dim, dtype=np.float32)
    tokens = re.findall(r"[a-z0-9]+|[\u3400-\u9fff]", text.lower()) or [text]
    for token in tokens:
        digest = hashlib.sha256(token.encode()).digest()
        index = int.from_bytes(digest[:4], "little") % dim
        vector[index] += 1.0 if digest[4] % 2 else -1.0
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        vector[0] = 1.0
        norm = 1.0
    return vector / norm


class ScriptedOpenAI:
    """Serves /v1/chat/completions, /v1/models and /v1/embeddings on 127.0.0.1."""

    def __init__(self, *, model: str = "scripted-model", embedding_dim: int = 64) -> None:
        self.model = model
        self.embedding_dim = embedding_dim
        # Multiplies every returned vector (real servers do not all return unit vectors).
        self.embedding_scale = 1.0
        self.queue: deque[Script] = deque()
        self.routes: list[Route] = []
        self.handler: Callable[[RequestJSON], Scripted] | None = None
        self.requests: list[RecordedRequest] = []
        self.unmatched: list[RequestJSON] = []
        self.embedding_failures: deque[Reply] = deque()
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ scripting

    def enqueue(self, *replies: Script) -> None:
        """Answers for the next chat requests, in order, before any route or handler."""
        self.queue.extend(replies)

    def route(
        self, match: str, reply: Script, *, where: str = "system", times: int | None = None
    ) -> Route:
        """Answer requests whose system prompt (``where``: "any"/"last" message) has ``match``."""
        if where not in ("system", "any", "last"):
            raise ValueError("where must be 'system', 'any' or 'last'")
        route = Route(match=match, reply=reply, where=where, times=times)
        self.routes.append(route)
        return route

    def reset(self) -> None:
        self.queue.clear()
        self.routes.clear()
        self.handler = None
        self.requests.clear()
        self.unmatched.clear()
        self.embedding_failures.clear()

    # ------------------------------------------------------------------ inspection

    @property
    def base_url(self) -> str:
        if not self.port:
            raise RuntimeError("the scripted server is not running")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chat_requests(self) -> list[RequestJSON]:
        return [r.body for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def embedding_requests(self) -> list[RequestJSON]:
        return [r.body for r in self.requests if r.path.endswith("/embeddings")]

    def llm_settings(self, **overrides: Any) -> LLMSettings:
        """LLMSettings pointing at this server, with short test-friendly timings."""
        values: dict[str, Any] = {
            "provider": "openai",
            "base_url": self.base_url,
            "api_key": "test-key",
            "model": self.model,
            "timeout_s": 5.0,
            "max_retries": 2,
            "backoff_s": 0.01,
        }
        values.update(overrides)
        return LLMSettings(**values)

    def embedder_settings(self, **overrides: Any) -> EmbedderSettings:
        values: dict[str, Any] = {
            "provider": "openai",
            "base_url": self.base_url,
            "api_key": "test-key",
            "model": "scripted-embedding",
            "timeout_s": 5.0,
            "max_retries": 1,
            "backoff_s": 0.01,
        }
        values.update(overrides)
        return EmbedderSettings(**values)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> ScriptedOpenAI:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        # Cancel a delayed handler when its client gives up, and never wait long on shutdown.
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        addresses = self._runner.addresses
        if not addresses:
            raise RuntimeError("the scripted OpenAI server did not bind a socket")
        self.port = int(addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.port = 0

    async def __aenter__(self) -> ScriptedOpenAI:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start_in_thread(self) -> ScriptedOpenAI:
        """Run on a private event loop in a daemon thread, for synchronous callers."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()

        self._thread_loop = loop
        self._thread = threading.Thread(target=serve, name="scripted-openai", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the scripted OpenAI server did not start within 10 s")
        return self

    def stop_thread(self) -> None:
        loop, thread = self._thread_loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._thread_loop = self._thread = None

    # ------------------------------------------------------------------ handlers

    def _resolve(self, body: RequestJSON) -> Reply | None:
        script: Script | None = None
        if self.queue:
            script = self.queue.popleft()
        else:
            for route in self.routes:
                if route.matches(body):
                    route.hits += 1
                    script = route.reply
                    break
            else:
                if self.handler is not None:
                    script = self.handler
        if script is None:
            return None
        answer = script(body) if callable(script) else script
        return _as_reply(answer)

    async def _chat(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        self.requests.append(RecordedRequest(request.path, body))
        reply = self._resolve(body)
        if reply is None:
            self.unmatched.append(body)
            return _error(500, "no scripted reply for this request", "server_error")
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.status != 200:
            return _error(reply.status, reply.error, headers=dict(reply.headers))
        return web.json_response(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", self.model),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": reply.content},
                        "finish_reason": reply.finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                },
            }
        )

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        self.requests.append(RecordedRequest(request.path, body))
        if self.embedding_failures:
            failure = self.embedding_failures.popleft()
            if failure.delay_s:
                await asyncio.sleep(failure.delay_s)
            return _error(failure.status, failure.error)
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        dim = int(body.get("dimensions") or self.embedding_dim)
        data = []
        for index, text in enumerate(texts):
            vector = hashed_embedding(str(text), dim) * np.float32(self.embedding_scale)
            if body.get("encoding_format") == "base64":
                embedding: Any = base64.b64encode(vector.astype(np.float32).tobytes()).decode()
            else:
                embedding = [float(x) for x in vector]
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(len(str(t).split()) for t in texts)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body.get("model", self.model),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _models(self, request: web.Request) -> web.Response:
        self.requests.append(RecordedRequest(request.path, {}))
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "tests"}]}
        )


def _as_reply(answer: Scripted) -> Reply:
    if isinstance(answer, Reply):
        return answer
    if isinstance(answer, str):
        return Reply(content=answer)
    return Reply.json(answer)


def _error(status: int, message: str, kind: str = "invalid_request_error",
           headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "code": None}}, status=status,
        headers=headers,
    )


async def _read_json(request: web.Request) -> RequestJSON:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        return {"_invalid_json": True}
    return body if isinstance(body, dict) else {"_body": body}
