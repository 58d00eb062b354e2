"""``POST /v1/completions`` and ``/v1/chat/completions`` over a decoupled text model.

The prompt (``prompt``; for chat, the messages' text contents joined by newlines, the model
having no chat template) goes to the model's BYTES input as one ``[1]`` (or ``[1, 1]``) tensor
through ``Server.infer_stream``; each response's BYTES output is the next piece of the text,
as the model sends it. ``max_tokens`` (also chat's ``max_completion_tokens``) is applied here:
after that many pieces the stream is closed (the model's request cancelled) and
``finish_reason`` is ``length``, else ``stop``. ``stream: true`` answers Server-Sent Events in
OpenAI's chunk shapes, ending with ``data: [DONE]``; ``stream_options.include_usage`` adds the
usage chunk. An error after the stream began is sent as an event ``{"error": {...}}`` (what
the ``openai`` client raises as ``APIError``), then ``[DONE]``.

Refused (400) as Triton's OpenAI frontend refuses them: ``n`` / ``best_of`` > 1, ``logit_bias``,
``suffix``, ``logprobs`` (Triton serves them only for vLLM), an empty prompt, a prompt that is
not one string, ``stream_options`` without ``stream``; beyond Triton, ``tools`` (no tool
parser). Accepted and ignored (the model has no such inputs): ``temperature``, ``top_p``,
``seed``, ``stop``, ``presence_penalty``, ``frequency_penalty``, ``user``, ``echo`` false.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import orjson

from workbench import InferenceRequest, InferenceResponse, RequestedOutput, Server, Tensor
from workbench.frontends.openai.errors import OpenAIError, as_openai_error, error_payload
from workbench.frontends.openai.model_kinds import TextModel, model_config, text_model
from workbench.frontends.openai.requests import optional, required_string
from workbench.frontends.openai.tokens import TokenCounters

DONE = b"data: [DONE]\n\n"


class Completion:
    """One completion request, checked: ``model``, ``prompt``, ``max_tokens`` (None: until the
    model ends), ``stream``, ``include_usage``, ``chat`` (chat completion shapes)."""

    def __init__(self, members: dict[str, Any], chat: bool) -> None:
        self.chat = chat
        self.name = required_string(members, "model")
        self.prompt = _chat_prompt(members) if chat else _prompt(members)
        limit = optional(members, "max_completion_tokens" if chat else "max_tokens", int)
        if chat and limit is None:
            limit = optional(members, "max_tokens", int)
        if limit is not None and limit < 1:
            raise OpenAIError("'max_tokens' must be at least 1", param="max_tokens")
        self.max_tokens: int | None = limit
        self.stream = bool(optional(members, "stream", bool, False))
        options = optional(members, "stream_options", dict)
        if options is not None and not self.stream:
            raise OpenAIError("`stream_options` can only be used when `stream` is True",
                              param="stream_options")
        self.include_usage = bool(options and options.get("include_usage"))
        _refuse_unsupported(members, chat)
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())


def _prompt(members: dict[str, Any]) -> str:
    prompt = members.get("prompt")
    if not prompt:
        raise OpenAIError("prompt must be non-empty", param="prompt")
    if not isinstance(prompt, str):
        raise OpenAIError("only single string input is supported", param="prompt")
    return prompt


def _chat_prompt(members: dict[str, Any]) -> str:
    messages = members.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError("'messages' must be a non-empty array", param="messages")
    texts = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # content parts: the text ones
            content = "\n".join(p.get("text", "") for p in content
                                if isinstance(p, dict) and p.get("type") == "text")
        if not isinstance(content, str):
            raise OpenAIError("each message must have a string 'content' (or text parts)",
                              param="messages")
        texts.append(content)
    prompt = "\n".join(texts)
    if not prompt:
        raise OpenAIError("prompt must be non-empty", param="messages")
    return prompt


def _refuse_unsupported(members: dict[str, Any], chat: bool) -> None:
    for name in ("n", "best_of"):
        value = members.get(name)
        if isinstance(value, int) and value > 1:
            raise OpenAIError(f"Received {name}={value}, but only single choice ({name}=1) is "
                              "currently supported", param=name)
    if members.get("logit_bias") is not None:
        raise OpenAIError("logit bias is not supported", param="logit_bias")
    if members.get("suffix") is not None:
        raise OpenAIError("suffix is not currently supported", param="suffix")
    if members.get("logprobs") not in (None, False, 0) or members.get("top_logprobs"):
        raise OpenAIError("logprobs are currently available only for the vLLM backend",
                          param="logprobs")
    if members.get("echo"):
        raise OpenAIError("echo is not supported", param="echo")
    if chat and members.get("tools"):
        raise OpenAIError("tools are not supported: the model has no tool-call parser",
                          param="tools")


def _request(model: TextModel, prompt: str) -> InferenceRequest:
    shape = (1, 1) if model.batched else (1,)
    data = np.empty(shape, dtype=object)
    data.flat[0] = prompt.encode("utf-8")
    return InferenceRequest(model.name, [Tensor(model.prompt_input, "BYTES", data)],
                            outputs=[RequestedOutput(model.text_output)])


def _piece(response: InferenceResponse, output: str) -> str | None:
    """The text of one response (None for the empty final one that only closes the stream)."""
    for tensor in response.outputs:
        if tensor.name == output:
            values = np.asarray(tensor.data).ravel()
            return "".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                           for v in values)
    return None


async def _pieces(server: Server, model: TextModel, job: Completion) -> AsyncIterator[str]:
    """The text pieces, at most ``max_tokens``; closing early cancels the model's request."""
    count = 0
    async with contextlib.aclosing(server.infer_stream(_request(model, job.prompt))) as responses:
        async for response in responses:
            piece = _piece(response, model.text_output)
            if piece is None:
                continue
            yield piece
            count += 1
            if job.max_tokens is not None and count >= job.max_tokens:
                return


def _choice(job: Completion, text: str | None, finish: str | None, first: bool = False) -> dict:
    if not job.chat:
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
    if not job.stream:
        return {"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": None, "finish_reason": finish}
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
    if text is not None:
        delta["content"] = text
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def _envelope(job: Completion, choices: list[dict], usage: dict | None) -> dict[str, Any]:
    kind = ("chat.completion.chunk" if job.stream else "chat.completion") if job.chat \
        else "text_completion"
    body = {"id": job.id, "object": kind, "created": job.created, "model": job.name,
            "system_fingerprint": None, "choices": choices}
    if usage is not None or not job.stream:
        body["usage"] = usage
    return body


class CompletionRun:
    """A checked request bound to its model: :meth:`answer` (one JSON) or :meth:`events` (SSE)."""

    def __init__(self, server: Server, counters: TokenCounters, job: Completion,
                 model: TextModel, config: dict[str, Any]) -> None:
        self.server = server
        self.counters = counters
        self.job = job
        self.model = model
        self.config = config

    async def _usage(self, completion_tokens: int) -> dict[str, int]:
        counter = await self.counters.for_model(self.job.name, self.config)
        prompt = await asyncio.to_thread(counter.prompt_tokens, self.job.prompt) if counter else 0
        return {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens}

    async def answer(self) -> dict[str, Any]:
        pieces = [p async for p in _pieces(self.server, self.model, self.job)]
        finish = _finish(self.job, len(pieces))
        return _envelope(self.job, [_choice(self.job, "".join(pieces), finish)],
                         await self._usage(len(pieces)))

    async def first_piece(self) -> tuple[AsyncIterator[str], str | None]:
        """Starts the stream and waits for its first piece, so that a request the engine
        refuses (unknown input, model unloaded) is answered with a status, not an event."""
        pieces = _pieces(self.server, self.model, self.job)
        try:
            return pieces, await anext(pieces)
        except StopAsyncIteration:
            return pieces, None

    async def events(self, pieces: AsyncIterator[str], first: str | None) -> AsyncIterator[bytes]:
        """The SSE events: the first piece (with chat's role), the pieces, the finishing
        chunk, the usage chunk (``include_usage``), ``[DONE]``."""
        job, count = self.job, 0
        try:
            if job.chat:
                yield _event(_envelope(job, [_choice(job, None, None, first=True)], None))
            if first is not None:
                count = 1
                yield _event(_envelope(job, [_choice(job, first, None)], None))
                async for piece in pieces:
                    count += 1
                    yield _event(_envelope(job, [_choice(job, piece, None)], None))
            yield _event(_envelope(job, [_choice(job, None if job.chat else "",
                                                 _finish(job, count))], None))
            if job.include_usage:
                yield _event(_envelope(job, [], await self._usage(count)))
        except Exception as exc:  # noqa: BLE001  # the error boundary's answer, as the stream's last event
            error = as_openai_error(exc, "a /v1 completion stream")
            yield _event(error_payload(error.message, error.status, error.param, error.code))
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]
        yield DONE


def _finish(job: Completion, count: int) -> str:
    return "length" if job.max_tokens is not None and count >= job.max_tokens else "stop"


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def prepare(server: Server, counters: TokenCounters, members: dict[str, Any],
                  chat: bool) -> CompletionRun:
    """The request checked and bound to its model.

    Raises:
        OpenAIError: 400: unknown model, not a text-generation model, bad or unsupported member.
    """
    job = Completion(members, chat)
    config = await model_config(server, job.name)
    return CompletionRun(server, counters, job, text_model(job.name, config), config)


__all__ = ["DONE", "Completion", "CompletionRun", "prepare"]
