"""The write calls: conversations, documents, memories, scheduler messages, commands and
feedback, each returning a ``WriteToken``; and ``wait_applied`` on such a token
(read-your-writes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from memstream.client.core import ClientCore, call_span
from memstream.client.errors import ClientError
from memstream.kafka.progress import NotAppliedYet, Progress
from memstream.topics.events import (
    ConversationChunk,
    Document,
    Event,
    ExtractedMemory,
    Feedback,
    Message,
    ScheduleMessage,
    WriteToken,
    new_event_id,
)
from memstream.topics.limits import check_content
from memstream.topics.models import SourceRef, Verdict, utcnow
from memstream.topics.registry import (
    CONVERSATIONS,
    MEMORY_COMMANDS,
    MEMORY_ITEMS,
    SCHEDULE_ADD,
    SCHEDULE_ANSWER,
    SCHEDULE_QUERY,
)

SCHEDULE_TOPICS = {"query": SCHEDULE_QUERY, "answer": SCHEDULE_ANSWER, "add": SCHEDULE_ADD}


class WriteCalls(ClientCore):
    """Publishes through ``publish``; ``wait_applied`` waits on what it returned."""

    async def add_messages(
        self,
        user_id: str,
        messages: Sequence[Message | Mapping[str, Any]],
        cube_id: str | None = None,
        session_id: str | None = None,
    ) -> WriteToken:
        """Publish a conversation chunk. Messages need ``role`` and ``content``; a missing ``id``
        or ``timestamp`` is filled in (an id from the chunk, the current time)."""
        chunk_id = new_event_id()
        now = utcnow()
        msgs = []
        for i, m in enumerate(messages):
            if isinstance(m, Message):
                msgs.append(m)
                continue
            data = {"id": f"{chunk_id}-{i}", "timestamp": now, **dict(m)}
            msgs.append(Message.model_validate(data))
        chunk = ConversationChunk(
            event_id=chunk_id, user_id=user_id, cube_id=cube_id or user_id, kind="chat",
            session_id=session_id, messages=tuple(msgs),
        )
        with call_span("add_messages", chunk):
            return await self.publish(CONVERSATIONS, chunk)

    async def add_document(
        self,
        user_id: str,
        text: str,
        cube_id: str | None = None,
        doc_id: str | None = None,
        title: str | None = None,
        uri: str | None = None,
    ) -> WriteToken:
        """Publish a document; the extraction stage chunks it (``source=file``)."""
        doc = Document(doc_id=doc_id or new_event_id(), text=text, title=title, uri=uri)
        chunk = ConversationChunk(user_id=user_id, cube_id=cube_id or user_id, kind="doc",
                                  document=doc)
        with call_span("add_document", chunk):
            return await self.publish(CONVERSATIONS, chunk)

    async def add_memories(
        self,
        user_id: str,
        memories: Sequence[str | Mapping[str, Any]],
        cube_id: str | None = None,
        session_id: str | None = None,
    ) -> WriteToken:
        """Add memories directly (no extraction). Each is a text or ExtractedMemory fields."""
        items = []
        for i, m in enumerate(memories):
            fields: dict[str, Any] = {"memory": m} if isinstance(m, str) else dict(m)
            fields.setdefault("sources", (SourceRef(kind="manual"),))
            items.append(ExtractedMemory(
                user_id=user_id, cube_id=cube_id or user_id, session_id=session_id,
                index=i, count=len(memories), **fields,
            ))
            check_content(items[-1], self.settings.limits)  # all checked before any is sent
        token: WriteToken | None = None
        with call_span("add_memories", items[0] if items else None):
            for item in items:
                token = await self.publish(MEMORY_ITEMS, item)
        if token is None:
            raise ClientError("add_memories needs at least one memory")
        return token

    # ------------------------------------------------------------------ scheduler and commands

    async def schedule(
        self, user_id: str, label: Literal["query", "answer", "add"], content: str = "",
        cube_id: str | None = None, session_id: str | None = None,
        memory_ids: Sequence[str] = (),
    ) -> WriteToken:
        """Tell the scheduler the user asked (``query``), the agent answered (``answer``), or
        memories were added by hand (``add``)."""
        spec = SCHEDULE_TOPICS.get(label)
        if spec is None:
            raise ValueError(f"unknown schedule label {label!r}; use query, answer or add")
        msg = ScheduleMessage(user_id=user_id, cube_id=cube_id or user_id, label=label,
                              content=content, session_id=session_id,
                              memory_ids=tuple(memory_ids))
        return await self.publish(spec, msg)

    async def command(self, command: Event) -> WriteToken:
        """Publish a ``MemoryCommand`` (update, delete, replace_working_memory, delete_cube, …)."""
        validated = MEMORY_COMMANDS.adapter.validate_python(command)
        return await self.publish(MEMORY_COMMANDS, validated)

    async def feedback(
        self, user_id: str, memory_id: str, verdict: Verdict, note: str | None = None, *,
        query: str | None = None, cube_id: str | None = None,
    ) -> WriteToken:
        """Say what a memory was worth to the agent that used it (a ``Feedback`` command):
        ``wrong`` (never returned again, kept for history), ``outdated`` (no longer holds),
        ``irrelevant`` (ranked lower for queries like ``query``, the one it was returned
        for), ``confirmed`` (true: nothing closes it automatically). ``note``: why, shown by
        ``history`` and ``explain``. ``memory_id`` is an exact id (a working-memory copy's
        applies to its memory); resolve prefixes first (``memstream.history.ids.stored``).
        ``wait_applied`` the token, then ``command_failure`` says if it was refused (an
        unknown id, a frozen memory)."""
        event = Feedback(user_id=user_id, cube_id=cube_id or user_id, node_id=memory_id,
                         verdict=verdict, note=note or "", query=query)
        with call_span("feedback", event):
            return await self.command(event)

    # ------------------------------------------------------------------ read-your-writes

    async def wait_applied(self, token: WriteToken, timeout: float = 60.0) -> None:
        """Return once the write behind ``token`` has been processed by every stage it feeds.

        Uses the workers' committed consumer offsets (a stage commits only after its
        outputs are acknowledged), so it holds across any number of workers.
        """
        if self._progress is None:
            self._progress = Progress(self.settings, self.bootstrap)
        try:
            await self._progress.wait_applied(token, timeout=timeout)
        except NotAppliedYet as exc:
            raise ClientError(str(exc)) from exc
