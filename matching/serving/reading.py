"""A request's body as `matching-serve` reads it, before any model sees it: within limits.max_request_bytes (a
declared length over it refused before reading; a chunked body as soon as it passes it), its media type
application/json, its JSON nested at most MAX_JSON_DEPTH deep and without NaN or Infinity, every text of it valid
Unicode, validated against its endpoint's request model; each refusal a `Refusal` that says what the endpoint
expects."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
from fastapi import Request
from pydantic import BaseModel, ValidationError

from matching.inference.queries import Limits
from matching.serving.answers import Refusal
from matching.serving.rerank import DOCUMENT

#: The deepest JSON nesting a request may have (a valid request nests 3 deep: an object, a list, an object).
MAX_JSON_DEPTH = 32


def _location(loc: tuple) -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return text or "the body"


def validation_message(expected: str, err: ValidationError) -> Refusal:
    """Pydantic's validation errors (missing or extra fields, a text that is not a string) as one 422 answer that
    names every problem once and shows what the endpoint expects."""
    problems: dict[str, str] = {}
    for e in err.errors():
        loc = tuple(e.get("loc", ()))
        if len(loc) >= 3 and loc[0] == "documents" and isinstance(loc[1], int):  # one document, two alternatives
            problems.setdefault(_location(loc[:2]), DOCUMENT)
        else:
            problems.setdefault(_location(loc), str(e.get("msg")))
    listed = "; ".join(f"{where}: {what}" for where, what in problems.items())
    return Refusal(422, f"invalid request: {listed}; expected {expected}")


#: A JSON string, its escapes included: what the nesting count skips.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
#: Each byte's step in nesting depth, as int8: '[' and '{' +1, ']' and '}' −1 (255), every other byte 0.
_NESTING = bytes(1 if b in b"[{" else 255 if b in b"]}" else 0 for b in range(256))


def _too_deep(text: bytes, limit: int) -> bool:
    """Whether JSON `text` nests deeper than `limit`, its strings left out: the running sum of the brackets' steps,
    in C (a regular expression, bytes.translate and NumPy), not byte by byte in Python on the event loop."""
    if text.count(b"[") + text.count(b"{") <= limit:
        return False
    steps = np.frombuffer(_JSON_STRING.sub(b"", text).translate(_NESTING), dtype=np.int8)
    return bool(steps.size) and int(np.cumsum(steps, dtype=np.int32).max()) > limit


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


async def read_body(request: Request, schema: type[BaseModel], limits: Limits, expected: str) -> Any:
    """The request's body, read within limits.max_request_bytes (a declared length over it is refused before
    reading; a chunked body as soon as it passes it), its media type application/json, its JSON nested at most
    MAX_JSON_DEPTH deep, validated against `schema`."""
    too_large = ("Payload too large: the request body has {size} bytes, over this server's limit of "
                 f"{limits.max_request_bytes:,} (limits.max_request_bytes); split the request")  # fmt: skip
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_request_bytes:
        raise Refusal(413, too_large.format(size=f"{int(declared):,}"))
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        shown = request.headers.get("content-type") or "none"
        raise Refusal(415, f"the request body must be JSON sent with the header Content-Type: application/json "
                           f"(this request's Content-Type: {shown:.80}; with curl, add -H "
                           f"'Content-Type: application/json'); expected {expected}")  # fmt: skip
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_request_bytes:
            raise Refusal(413, too_large.format(size=f"over {limits.max_request_bytes:,}"))
        chunks.append(chunk)
    body = b"".join(chunks)
    if _too_deep(body, MAX_JSON_DEPTH):
        raise Refusal(400, f"the request body nests deeper than {MAX_JSON_DEPTH} levels of arrays and objects; send "
                           f"{expected}")  # fmt: skip
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:  # not JSON, not UTF-8, NaN/Infinity, a number of 4,300+ digits
        raise Refusal(400, f"the request body is not valid JSON ({str(err):.200}); send {expected} with "
                           f"Content-Type: application/json") from None  # fmt: skip
    _no_lone_surrogate(body, data)
    try:
        return schema.model_validate(data)
    except ValidationError as err:
        raise validation_message(expected, err) from None


#: A JSON escape of a UTF-16 surrogate: the only way a valid UTF-8 body can hold one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _no_lone_surrogate(body: bytes, data: Any, where: str = "") -> None:
    """A 422 naming the first text of the request that cannot be encoded as UTF-8: a lone surrogate such as
    "\\ud800", which JSON's escapes (or bytes that are not UTF-8, read leniently) allow and no text holds. The texts
    are looked through only when the body could hold one."""
    if where == "" and not _SURROGATE_ESCAPE.search(body):
        try:
            body.decode("utf-8")
            return
        except UnicodeDecodeError:
            pass
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError as err:
            raise Refusal(422, f"invalid request: {where or 'the body'} holds a lone surrogate "
                               f"(\\u{ord(data[err.start]):04x} at character {err.start}), which is not text; send "
                               "valid Unicode") from None  # fmt: skip
    elif isinstance(data, dict):
        for key, value in data.items():
            _no_lone_surrogate(body, value, f"{where}.{key}".lstrip("."))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _no_lone_surrogate(body, value, f"{where}[{i}]")
