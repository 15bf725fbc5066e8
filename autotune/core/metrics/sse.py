"""Parsing of OpenAI-compatible server-sent-event lines from vLLM. Pure: text in, records out."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class StreamChunk:
    """What one ``data:`` line carried."""

    has_tokens: bool = False  # a choice with generated text (counts for TTFT/ITL)
    text: str = ""
    completion_tokens: int | None = None  # from the final usage chunk
    error: str = ""
    done: bool = False


def _error_message(data: dict) -> str:
    err = data.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    if err:
        return str(err)
    if data.get("object") == "error":
        return str(data.get("message", "error chunk"))
    return ""


def parse_sse_line(line: str) -> StreamChunk | None:
    """Parse one line of a streaming response; None for blank lines, comments and keep-alives."""
    line = line.strip()
    if not line or line.startswith(":"):
        return None
    if not line.startswith("data:"):
        return None
    payload = line[len("data:") :].strip()
    if payload == "[DONE]":
        return StreamChunk(done=True)
    try:
        data = json.loads(payload)
    except json.JSONDecodeError:
        return StreamChunk(error=f"malformed stream chunk: {payload[:200]}")
    if not isinstance(data, dict):
        return StreamChunk(error=f"unexpected stream chunk: {payload[:200]}")
    message = _error_message(data)
    if message:
        return StreamChunk(error=message)
    usage = data.get("usage") or {}
    completion_tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    choices = data.get("choices") or []
    if not choices:
        return StreamChunk(completion_tokens=completion_tokens)
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):  # chat completions
        text = delta.get("content") or delta.get("reasoning_content") or ""
    else:
        text = choice.get("text") or ""
    # vLLM's benchmark counts any chunk with a choice as a token arrival; so do we.
    return StreamChunk(has_tokens=True, text=text, completion_tokens=completion_tokens)
