"""The MCP server: one user's memstream memory as tools and resources, over stdio or
streamable HTTP, with the official ``mcp`` SDK (extra ``memstream[mcp]``).

The user and the cube are the server's (``memstream mcp --user ID [--cube ID]``): no tool
takes them, so what a model writes in its arguments can never reach another cube.
"""

# No ``from __future__ import annotations``: the SDK reads the tools' annotations to build
# their JSON schemas.

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from memstream import __version__
from memstream.agents.memory_tools import Identity, MemoryTools, ToolFailure
from memstream.client.client import ClientError, MemoryClient, MemoryServiceError
from memstream.history.ids import AmbiguousId, NodeNotFound
from memstream.topics.context import DEFAULT_BUDGET, Unit
from memstream.topics.events import MAX_TOP_K
from memstream.topics.limits import LimitExceeded
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.mcp")
T = TypeVar("T")

INSTRUCTIONS = """\
Long-term memory of one user (memstream). Before answering a question that may depend on \
what the user said earlier (preferences, facts about their life, plans, people they know), \
call memory_context (what is known, as one block ready for your prompt) or search_memories \
(memories one by one, with scores). When the user tells you something worth keeping, call \
add_chat_turn with their message (memstream extracts the memories itself) or add_memory \
with one self-contained statement. Memory ids come from memory_context, search_memories or \
list_memories; use them with get_memories, update_memory, delete_memories, memory_history \
and explain_memory. \
When a memory you were given turns out wrong, outdated or irrelevant to the question, or \
the user confirms it, say so with memory_feedback. \
The resource memstream://activation is a ready-to-prepend summary of what is known now."""

WORKING_MEMORY_URI = "memstream://working-memory"
ACTIVATION_URI = "memstream://activation"

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
CHANGE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                         open_world_hint=False)

Ids = Annotated[list[str], Field(min_length=1, max_length=100, description=(
    "Memory ids, as returned by search or list (or their first 8+ characters)."))]
MemoryId = Annotated[str, Field(description=(
    "The id of the memory, as returned by search or list (or its first 8+ characters)."))]
SessionId = Annotated[str | None, Field(
    description="Conversation/session id to file the memory under (optional).")]


async def _answer(call: Awaitable[T]) -> T:
    """A tool's result, or its failure as one line the model can act on."""
    try:
        return await call
    except (ToolFailure, NodeNotFound, AmbiguousId) as exc:
        raise ToolError(str(exc).strip("'\"")) from None
    except MemoryServiceError as exc:
        raise ToolError(exc.message) from None
    except LimitExceeded as exc:
        raise ToolError(f"{exc}; nothing was stored") from None
    except ClientError as exc:
        raise ToolError(f"memstream is not reachable: {exc}") from None


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


def build_server(tools: MemoryTools, log_level: LogLevel = "WARNING") -> MCPServer:
    """An ``MCPServer`` whose tools and resources act on ``tools``' user and cube."""
    me = tools.me
    server: MCPServer = MCPServer(
        "memstream", title="memstream memory", version=__version__, log_level=log_level,
        instructions=INSTRUCTIONS + f" (user '{me.user_id}', memory cube '{me.cube_id}')")

    @server.tool(title="Search memories", annotations=READ)
    async def search_memories(
        query: Annotated[str, Field(description=(
            "What to look for, in natural language: a question or a topic "
            "(e.g. 'what food is the user allergic to?')."))],
        top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K,
                                    description="How many results at most.")] = 5,
        min_score: Annotated[float | None, Field(ge=0, le=1, description=(
            "Drop results scoring below this (0-1). Applied after ranking, so fewer than "
            "top_k results may come back; leave it out to get the top_k best."))] = None,
        memory_type: Annotated[
            Literal["All", "UserMemory", "LongTermMemory", "EpisodicMemory", "WorkingMemory"],
            Field(description=(
                "UserMemory: the user's preferences, habits and traits; LongTermMemory: "
                "facts, plans, events, other people; EpisodicMemory: conversation turns as "
                "they were said; WorkingMemory: what is in focus now; All: every kind."))
        ] = "All",
        session_id: Annotated[str | None, Field(
            description="Only memories from this conversation/session.")] = None,
        tags: Annotated[list[str] | None, Field(
            description="Only memories carrying one of these tags.")] = None,
    ) -> dict[str, Any]:
        """Find what the user's long-term memory holds about something, best match first.

        Use before answering anything that may depend on what the user said in earlier
        conversations. Each result has an id, the memory text, its kind, tags, status and a
        score between 0 and 1 (higher is more relevant)."""
        return await _answer(tools.search(query, top_k, min_score, memory_type, session_id,
                                          tags or []))

    @server.tool(title="Memory context for a prompt", annotations=READ)
    async def memory_context(
        query: Annotated[str, Field(description=(
            "What the answer depends on, in natural language: the user's question, or a "
            "topic (e.g. 'where does the user live now?')."))],
        budget: Annotated[int, Field(ge=100, le=100_000, description=(
            "At most this many characters of context."))] = DEFAULT_BUDGET,
        tokens: Annotated[int | None, Field(ge=25, le=25_000, description=(
            "At most this many tokens instead (estimated, erring high); overrides "
            "budget."))] = None,
    ) -> dict[str, Any]:
        """What the user's long-term memory holds about something, as one block of text to
        put in your prompt: the most relevant memories first, each opening with '#' and its
        id, then what was said, with its date and time and who said it; a memory that no
        longer holds says until when. The last line says how many more did not fit.

        Use it to ground an answer in what the user said in earlier conversations; use
        search_memories instead to browse memories one by one with their scores. The ids
        (the 8 characters after '#') work with get_memories, memory_feedback and the other
        tools."""
        unit: Unit = "chars" if tokens is None else "tokens"
        return await _answer(tools.context(query, tokens or budget, unit))

    @server.tool(title="Add a memory", annotations=WRITE)
    async def add_memory(
        text: Annotated[str, Field(description=(
            "One self-contained statement, in the third person, with absolute dates "
            "(e.g. 'The user is allergic to peanuts.')."))],
        memory_type: Annotated[Literal["UserMemory", "LongTermMemory"], Field(description=(
            "UserMemory for the user's own preferences, habits and traits; LongTermMemory "
            "for facts, plans, events and other people."))] = "LongTermMemory",
        tags: Annotated[list[str] | None, Field(
            description="A few short topic tags (optional).")] = None,
        session_id: SessionId = None,
    ) -> dict[str, Any]:
        """Store one statement in long-term memory exactly as given (no extraction).

        Use when you already know the fact worth keeping. Returns the stored memory with its
        id once it is searchable. To keep what the user said in a conversation, prefer
        add_chat_turn, which extracts the facts itself."""
        return await _answer(tools.add_memory(text, memory_type, tags or [], session_id))

    @server.tool(title="Add a chat turn", annotations=WRITE)
    async def add_chat_turn(
        user_message: Annotated[str, Field(description="What the user said, verbatim.")],
        assistant_message: Annotated[str | None, Field(
            description="Your reply to it, verbatim (optional).")] = None,
        session_id: SessionId = None,
    ) -> dict[str, Any]:
        """Record one exchange of the conversation; memstream extracts and stores the
        memories in it (preferences, facts, plans), resolves relative dates, and merges
        them with what it already knows.

        Call it after a user message that tells something about the user or their world.
        Returns the memories extracted from this turn once they are searchable."""
        return await _answer(tools.add_chat_turn(user_message, assistant_message, session_id))

    @server.tool(title="Get memories", annotations=READ)
    async def get_memories(memory_ids: Ids) -> dict[str, Any]:
        """Read memories by id (or its first 8+ characters), with their sources (the
        messages or documents they came from), confidence and dates. Ids that name no memory
        are listed in not_found; a prefix naming several memories fails, naming them."""
        return await _answer(tools.get(memory_ids))

    @server.tool(title="List memories", annotations=READ)
    async def list_memories(
        memory_type: Annotated[
            Literal["UserMemory", "LongTermMemory", "EpisodicMemory", "WorkingMemory"] | None,
            Field(description="Only this kind (default: all stored kinds).")] = None,
        limit: Annotated[int, Field(ge=1, le=500,
                                    description="How many memories at most.")] = 20,
        include_archived: Annotated[bool, Field(
            description="Also memories that were archived or merged into others.")] = False,
    ) -> dict[str, Any]:
        """List the user's memories, most recently changed first, with the total count.

        Use to browse or review what is stored; to answer a question, search_memories
        finds the relevant memories faster."""
        return await _answer(tools.list_memories(memory_type, limit, include_archived))

    @server.tool(title="Update a memory", annotations=CHANGE)
    async def update_memory(
        memory_id: MemoryId,
        text: Annotated[str | None, Field(description="The corrected statement.")] = None,
        tags: Annotated[list[str] | None, Field(
            description="New tags (replace the old ones).")] = None,
        key: Annotated[str | None, Field(description="A new short title.")] = None,
        status: Annotated[Literal["activated", "archived"] | None, Field(description=(
            "archived: keep it but leave it out of searches; activated: bring it "
            "back."))] = None,
    ) -> dict[str, Any]:
        """Correct or retire one memory: new text, tags, title, or status.

        Use when the user corrects something memstream holds, or says it no longer
        applies (archive it). The change is recorded in the memory's history."""
        return await _answer(tools.update(memory_id, text, tags, key, status))

    @server.tool(title="Give feedback on a memory", annotations=CHANGE)
    async def memory_feedback(
        memory_id: MemoryId,
        verdict: Annotated[Literal["wrong", "outdated", "irrelevant", "confirmed"], Field(
            description=(
                "wrong: it was never true (it is never returned again, but kept in its "
                "history); outdated: it was true but no longer holds (it leaves working "
                "memory); irrelevant: true, but not what the question was about (ranked "
                "lower for similar questions; give query); confirmed: the user confirmed "
                "it is true."))],
        note: Annotated[str | None, Field(description=(
            "Why, in one sentence (e.g. 'the user moved to Lyon in May'); shown in the "
            "memory's history."))] = None,
        query: Annotated[str | None, Field(description=(
            "The search query it was returned for (needed for irrelevant)."))] = None,
    ) -> dict[str, Any]:
        """Tell memstream what a memory was worth: wrong, outdated, irrelevant to the
        question, or confirmed by the user.

        Use when the user corrects something a memory said (wrong), says it has changed
        (outdated; add the new fact with add_memory or add_chat_turn), or when a search
        result was off-topic for the question (irrelevant, with the query). Returns the
        memory as it now stands; the verdict and note appear in memory_history."""
        return await _answer(tools.feedback(memory_id, verdict, note, query))

    @server.tool(title="Delete memories", annotations=CHANGE)
    async def delete_memories(memory_ids: Ids) -> dict[str, Any]:
        """Delete memories for good (with their working-memory copies).

        Only when the user asks to forget something; to retire a memory that is out of
        date, prefer update_memory with status 'archived'. Fails, deleting nothing, if an id
        does not exist."""
        return await _answer(tools.delete(memory_ids))

    @server.tool(title="History of a memory", annotations=READ)
    async def memory_history(memory_id: MemoryId) -> dict[str, Any]:
        """Every change of one memory, oldest first: when it was added, merged, updated,
        archived, by which stage, and the event that caused each change. For a
        working-memory copy, copy_of names the memory it copies, whose changes are shown
        too."""
        return await _answer(tools.history(memory_id))

    @server.tool(title="Explain a memory", annotations=READ)
    async def explain_memory(memory_id: MemoryId) -> dict[str, Any]:
        """Why memstream believes a memory: the messages it was extracted from (who said
        what, when), and the memories it was merged or inferred from; for a summary, the
        stage that made it and the memories it summarizes; for a working-memory copy, the
        memory it copies.

        Use when the user asks where something came from, or before relying on a memory
        that seems doubtful."""
        return await _answer(tools.explain(memory_id))

    @server.resource(WORKING_MEMORY_URI, name="working-memory", mime_type="application/json",
                     description="The memories in focus for this user now, in order "
                                 "(JSON list).")
    async def working_memory() -> str:
        import json

        return json.dumps(await _read(tools.working_memory()), ensure_ascii=False)

    @server.resource(ACTIVATION_URI, name="activation", mime_type="text/plain",
                     description="What is known about the user now, as a block ready to "
                                 "prepend to a prompt (empty when nothing is known).")
    async def activation() -> str:
        return await _read(tools.activation_block())

    return server


async def _read(call: Awaitable[T]) -> T:
    try:
        return await call
    except (MemoryServiceError, ClientError) as exc:
        raise ResourceError(str(exc)) from None


async def serve(settings: Settings, identity: Identity, http_port: int | None, host: str,
                log_level: LogLevel = "WARNING",
                on_ready: Callable[[str], None] | None = None) -> None:
    """Run the server until its transport ends (stdin closed, or the HTTP server stopped)."""
    async with MemoryClient(settings) as client:
        server = build_server(MemoryTools(client, identity), log_level)
        if http_port is None:
            if on_ready is not None:
                on_ready("stdio")
            await server.run_stdio_async()
            return
        if on_ready is not None:
            on_ready(f"http://{host}:{http_port}/mcp")
        await server.run_streamable_http_async(host=host, port=http_port)
