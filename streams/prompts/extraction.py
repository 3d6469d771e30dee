"""Memory extraction (MemReader) as a typed task.

``ExtractionContext`` in, chat messages out (``render``), answers validated by
``ExtractionResponse``; the ``rules`` stand-in is ``streams.llm.rules.extraction``. Nothing here
reads the clock: the stage passes ``now`` in.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from memstream.streams.prompts.promptkit import ChatMessage, Task
from memstream.streams.text.words import detect_language
from memstream.topics.models import StoredMemoryType

ItemType = Literal["fact", "event", "opinion", "procedure"]


class ExtractionMessage(BaseModel):
    """One message of the chunk, as the model sees it."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    role: Literal["user", "assistant", "system", "tool"]
    content: str
    timestamp: AwareDatetime
    name: str | None = None  # who is speaking, when not the cube's user (another person)


class ExtractionContext(BaseModel):
    """A chat chunk (``messages``) or one piece of a document (``document_text`` + offsets)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["chat", "doc"] = "chat"
    user_id: str
    session_id: str | None = None
    now: AwareDatetime
    messages: list[ExtractionMessage] = Field(default_factory=list)
    document_text: str | None = None
    doc_id: str | None = None
    doc_title: str | None = None
    chunk_index: int = 0
    char_start: int = 0
    char_end: int | None = None

    @model_validator(mode="after")
    def _payload_matches_kind(self) -> ExtractionContext:
        if self.kind == "chat" and not self.messages:
            raise ValueError("a chat extraction needs messages")
        if self.kind == "doc" and not (self.document_text and self.document_text.strip()):
            raise ValueError("a doc extraction needs document_text")
        return self


_TYPE_ALIASES = {
    "usermemory": "UserMemory",
    "user": "UserMemory",
    "user_memory": "UserMemory",
    "longtermmemory": "LongTermMemory",
    "longterm": "LongTermMemory",
    "long_term_memory": "LongTermMemory",
    "long_term": "LongTermMemory",
}


class ExtractedItem(BaseModel):
    """One memory as the model writes it; lenient on shapes models commonly get slightly wrong."""

    model_config = ConfigDict(extra="ignore")

    key: str = ""
    memory_type: StoredMemoryType = "LongTermMemory"
    value: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    memory_time: str | None = None
    source_message_ids: list[str] = Field(default_factory=list)
    type: ItemType = "fact"

    @field_validator("memory_type", mode="before")
    @classmethod
    def _memory_type_alias(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _TYPE_ALIASES.get(re.sub(r"[\s-]", "", value).lower(), value)
        return value

    @field_validator("tags", mode="before")
    @classmethod
    def _tags_from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [t.strip() for t in re.split(r"[,，、;；]", value) if t.strip()]
        return value

    @field_validator("source_message_ids", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        if isinstance(value, str | int):
            value = [value]
        if isinstance(value, list):
            return [str(v) for v in value]
        return value

    @field_validator("memory_time", mode="before")
    @classmethod
    def _iso_or_none(cls, value: Any) -> Any:
        """Keeps ISO dates / datetimes; vague text ("unknown", "soon") becomes null."""
        if value is None or not isinstance(value, str) or not value.strip():
            return None
        text = value.strip()
        try:
            if len(text) == 10:
                date.fromisoformat(text)
            else:
                datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        return text


class ExtractionResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    memories: list[ExtractedItem] = Field(default_factory=list)
    summary: str = ""


# --------------------------------------------------------------------------- prompt text

_COMMON_RULES = """\
- Language: write every key, value, tag and the summary in the language the {source} is \
written in. Chinese in, Chinese out; English in, English out. Never translate.
- Self-contained: each value is one complete statement that makes sense months later, read \
alone. Replace pronouns, nicknames and aliases by who or what they refer to.
- Time: turn relative time expressions ("yesterday", "next Friday", "in two weeks", "明天", \
"下周三") into absolute calendar dates and write those dates into the value. {time_rule} \
Keep the time an event happens apart from the time it was mentioned. When a date is vague or \
your calculation is uncertain, say so in the value ("around mid-May 2024", "probably \
2024-05-10"). memory_time is the event date as YYYY-MM-DD (a full ISO 8601 timestamp if the \
time of day is known), or null when the memory has no event time.
- Faithful: record only what the {source} actually says. Do not invent, guess or generalise."""

_OUTPUT_SPEC = """\
Answer with one JSON object and nothing else: no explanations, no markdown fences.
{
  "memories": [
    {
      "key": "a short title of a few words",
      "memory_type": "UserMemory or LongTermMemory",
      "value": "the memory as one self-contained statement",
      "tags": ["2 to 5 short topic words"],
      "memory_time": "YYYY-MM-DD or null",
      "source_message_ids": [%s],
      "type": "fact, event, opinion or procedure"
    }
  ],
  "summary": "two or three sentences on what this %s is about"
}
If nothing is worth remembering, answer {"memories": [], "summary": "..."}."""

_CHAT_SYSTEM = """\
You keep the long-term memory of a personal assistant. Below is a stretch of conversation \
between a user and an assistant. Write down everything about it that the user would expect \
the assistant to remember later, as separate memories.

Rules:
- Third person: every memory is about the user and says so ("The user …"; in Chinese \
"用户……"). Never write "I", "me", "my" or "you" in a memory.
- Who said what: keep the speakers apart. What the assistant suggested, recommended or claimed \
is recorded as the assistant's ("The assistant recommended …"), and never as the user's \
preference, plan or belief unless the user clearly accepted or stated it. What the user reports \
about other people is recorded as about those people ("The user's sister Mei …").
{common}
- Complete: leave out nothing the user would remember — preferences, dislikes, habits, plans, \
decisions, appointments, events, people and relationships, places, numbers, health, work, \
feelings about things, requests. Skip greetings and small talk. One memory per distinct piece \
of information.
- memory_type "UserMemory": about the user as a person: preferences, likes and dislikes, \
habits and routines, traits, skills, health facts, and the user's personal experiences.
- memory_type "LongTermMemory": everything else worth keeping: facts, plans, decisions, \
arrangements, events, and statements made by other people or by the assistant.
- type: "fact", "event" (something that happens or happened at a time), "opinion" (a \
preference, judgement or feeling) or "procedure" (how something is done, steps of a routine).
- source_message_ids: the ids (in square brackets) of the messages each memory comes from. \
Every memory has at least one.

{output}"""

_DOC_SYSTEM = """\
You keep the long-term memory of a personal assistant. Below is one piece of a document the \
user gave you. Write down the knowledge in it worth remembering, as separate memories.

Rules:
- Do not attribute the document's statements to the user: "the report states …", not "the \
user thinks …". Use "The user …" only where the document is clearly written by the user about \
themselves (their own notes in the first person), and then write it in the third person.
{common}
- Complete: keep every fact, figure, definition, decision, date, name and step that a reader \
would want to recall; one memory per distinct piece of information. Skip boilerplate.
- memory_type "LongTermMemory" for the document's knowledge; "UserMemory" only for \
preferences, habits or traits of the user stated in the user's own notes.
- type: "fact", "event", "opinion" or "procedure" (instructions, steps).
- source_message_ids: always [] for documents (the piece itself is the source).

{output}"""


def _system_prompt(ctx: ExtractionContext) -> str:
    if ctx.kind == "chat":
        common = _COMMON_RULES.format(
            source="conversation",
            time_rule="Compute them from the timestamp of the message that contains them.",
        )
        output = _OUTPUT_SPEC % ('"ids of the messages"', "conversation")
        return _CHAT_SYSTEM.format(common=common, output=output)
    common = _COMMON_RULES.format(
        source="document",
        time_rule="Compute them from a date the document itself gives; if it gives none, "
        "keep the expression and state that the reference date is unknown.",
    )
    return _DOC_SYSTEM.format(common=common, output=_OUTPUT_SPEC % ("", "piece of the document"))


def _stamp(moment: datetime) -> str:
    return f"{moment.isoformat(timespec='minutes')} ({moment:%A})"


def _language_line(texts: list[str]) -> str:
    language = detect_language(texts)
    if language is None:
        return "Write the memories in the language the user writes in."
    return f"The text is in {language}: write the memories in {language}."


def render(ctx: ExtractionContext) -> list[ChatMessage]:
    """System rules plus the chunk, every message with its id, timestamp and role."""
    header = [f"Current time: {_stamp(ctx.now)}", f"User id: {ctx.user_id}"]
    if ctx.session_id:
        header.append(f"Session id: {ctx.session_id}")
    if ctx.kind == "chat":
        user_texts = [m.content for m in ctx.messages if m.role == "user"] or [
            m.content for m in ctx.messages
        ]
        lines = []
        for m in ctx.messages:
            content = m.content.strip().replace("\n", "\n    ")
            lines.append(f"[{m.id}] {_stamp(m.timestamp)} {m.role}: {content}")
        body = (
            "Conversation (each line: [message id] timestamp (weekday) role: content):\n"
            + "\n".join(lines)
        )
    else:
        user_texts = [ctx.document_text or ""]
        where = f"Document: {ctx.doc_id or 'unknown'}"
        if ctx.doc_title:
            where += f" — {ctx.doc_title}"
        end = ctx.char_end if ctx.char_end is not None else ctx.char_start + len(user_texts[0])
        where += f" (piece {ctx.chunk_index}, characters {ctx.char_start}–{end})"
        body = f"{where}\n<document>\n{(ctx.document_text or '').strip()}\n</document>"
    header.append(_language_line(user_texts))
    user = "\n".join(header) + "\n\n" + body + "\n\nAnswer with the JSON object only."
    return [
        {"role": "system", "content": _system_prompt(ctx)},
        {"role": "user", "content": user},
    ]






EXTRACTION: Task[ExtractionContext, ExtractionResponse] = Task(
    name="extraction",
    render=render,
    response=ExtractionResponse,
)
