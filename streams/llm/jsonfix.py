"""Recover one JSON value from a model's answer.

Models wrap JSON in markdown fences, chat around it, leave trailing commas or
``//`` comments, or think aloud first (``<think>…</think>``). Repairing those
here saves a retry (a full model call) for answers that are right in substance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["JSONRecoveryError", "recover_json"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_OPENERS = {"{": "}", "[": "]"}
# Bounds the work spent on long, JSON-free answers.
_MAX_CANDIDATES = 64


class JSONRecoveryError(ValueError):
    """The answer holds no recoverable JSON value."""


def recover_json(text: str) -> Any:
    """The first JSON value found in ``text``: plain, fenced, or embedded in prose.

    Tries, in order: the whole answer; the contents of each fenced block; each
    balanced ``{…}`` / ``[…]`` span from left to right. Every candidate is also
    tried after removing comments and trailing commas.
    """
    if not text or not text.strip():
        raise JSONRecoveryError("the answer is empty")
    cleaned = _THINK.sub("", text.lstrip("\ufeff")).strip()
    for candidate in _candidates(cleaned):
        value = _parse(candidate)
        if value is not _FAIL:
            return value
    preview = " ".join(cleaned.split())[:200]
    raise JSONRecoveryError(f"no JSON object or array found in the answer: {preview!r}")


_FAIL = object()


def _parse(candidate: str) -> Any:
    for attempt in (candidate, _strip_comments_and_trailing_commas(candidate)):
        try:
            return json.loads(attempt)
        except ValueError:
            continue
    return _FAIL


def _candidates(text: str) -> Iterator[str]:
    if text:
        yield text
    for match in _FENCE.finditer(text):
        body = match.group(2).strip()
        if body:
            yield body
            yield from _balanced_spans(body)
    yield from _balanced_spans(text)


def _balanced_spans(text: str) -> Iterator[str]:
    """Every balanced bracket span, by start position, skipping brackets inside strings."""
    produced = 0
    start = _next_opener(text, 0)
    while start != -1 and produced < _MAX_CANDIDATES:
        end = _matching_close(text, start)
        if end != -1:
            produced += 1
            yield text[start : end + 1]
        start = _next_opener(text, start + 1)


def _next_opener(text: str, pos: int) -> int:
    hits = [i for i in (text.find("{", pos), text.find("[", pos)) if i != -1]
    return min(hits) if hits else -1


def _matching_close(text: str, start: int) -> int:
    """Index of the bracket closing ``text[start]``, or -1 if unbalanced or mismatched."""
    stack: list[str] = []
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in _OPENERS:
            stack.append(_OPENERS[ch])
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return -1
            if not stack:
                return i
    return -1


def _strip_comments_and_trailing_commas(text: str) -> str:
    """Drop ``//`` and ``/* */`` comments and commas before ``}``/``]``, outside strings."""
    out: list[str] = []
    i = 0
    n = len(text)
    in_string = False
    escaped = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            i += 1
            continue
        if ch == '"':
            in_string = True
            out.append(ch)
            i += 1
        elif text.startswith("//", i):
            newline = text.find("\n", i)
            i = n if newline == -1 else newline
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = n if close == -1 else close + 2
        elif ch == ",":
            j = _skip_space_and_comments(text, i + 1)
            if j < n and text[j] in "}]":
                i += 1  # trailing comma: drop it
            else:
                out.append(ch)
                i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _skip_space_and_comments(text: str, i: int) -> int:
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("//", i):
            newline = text.find("\n", i)
            i = n if newline == -1 else newline
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = n if close == -1 else close + 2
        else:
            break
    return i
