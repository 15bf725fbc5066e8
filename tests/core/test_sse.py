"""Parsing of vLLM's streamed chunks."""

from autotune.core.metrics.sse import StreamChunk, parse_sse_line


def test_completion_chunk_carries_text():
    line = 'data: {"choices":[{"index":0,"text":" t5","finish_reason":null}]}'
    assert parse_sse_line(line) == StreamChunk(has_tokens=True, text=" t5")


def test_chat_delta_is_read():
    line = 'data: {"choices":[{"delta":{"content":"hi"}}]}'
    assert parse_sse_line(line).text == "hi"


def test_final_usage_chunk_has_no_tokens_but_the_count():
    line = 'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}'
    assert parse_sse_line(line) == StreamChunk(completion_tokens=7)


def test_error_chunk_and_done_and_keepalives():
    err = parse_sse_line('data: {"error":{"message":"EngineCore encountered an issue"}}')
    assert err.error == "EngineCore encountered an issue"
    assert parse_sse_line("data: [DONE]").done
    assert parse_sse_line("") is None and parse_sse_line(": ping") is None
    assert parse_sse_line("data: {not json").error.startswith("malformed")
