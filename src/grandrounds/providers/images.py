"""Messages with images as each API takes them, and the limits checked before any call.

A message whose content is a plain string is sent as that string, exactly as before images
existed. A message of parts is sent as a list: OpenAI-compatible servers take
``{"type": "image_url", "image_url": {"url": "data:<media type>;base64,<data>"}}`` parts (and
``detail`` where the user sets it); Anthropic takes ``{"type": "image", "source": {"type":
"base64", "media_type", "data"}}`` blocks. Each image is base64-encoded once per process
(:func:`encoded`, keyed by its sha256), however many calls send it.

Limits (:class:`ImageLimits`) are checked per sample before the first call, so a run never
starts and then stops on the one oversized image: Anthropic's published limits (docs.anthropic.com,
"Vision": JPEG, PNG, GIF and WebP; at most 8,000 px a side; 5 MB an image through the API; a request
of at most 32 MB), and for OpenAI-compatible servers a cap the user sets (``--model-opt
max_image_mb``; 20 MB by default, OpenAI's published per-image limit). OpenAI's ``detail`` is part of
the image part (``--param image_detail``), so it is in every request's key.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import ImagePart, Message, Sample, TextPart
from grandrounds.providers.base import ProviderError

#: How many encoded images are kept: enough for a benchmark's distinct images (SLAKE has 180).
_KEEP = 512
_ENCODED: OrderedDict[str, str] = OrderedDict()
_LOCK = threading.Lock()


def encoded(part: ImagePart) -> str:
    """The image's bytes in base64, encoded once per process."""
    with _LOCK:
        hit = _ENCODED.get(part.sha256)
        if hit is not None:
            _ENCODED.move_to_end(part.sha256)
            return hit
    if part.data is None:
        raise ProviderError(
            f"image {part.sha256[:12]}: its bytes were not loaded with the sample", retryable=False
        )
    text = base64.b64encode(part.data).decode("ascii")
    with _LOCK:
        _ENCODED[part.sha256] = text
        while len(_ENCODED) > _KEEP:
            _ENCODED.popitem(last=False)
    return text


def openai_content(message: Message) -> Any:
    """A message's ``content`` as the Chat Completions API takes it."""
    if isinstance(message.content, str):
        return message.content
    out: list[dict[str, Any]] = []
    for p in message.content:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif not isinstance(p, ImagePart):
            raise TypeError(
                f"a {type(p).__name__} is not message content (tool turns have their own form)"
            )
        else:
            url: dict[str, Any] = {"url": f"data:{p.media_type};base64,{encoded(p)}"}
            if p.detail:
                url["detail"] = p.detail
            out.append({"type": "image_url", "image_url": url})
    return out


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": openai_content(m)} for m in messages]


def anthropic_content(message: Message) -> Any:
    """A message's ``content`` as the Messages API takes it."""
    if isinstance(message.content, str):
        return message.content
    out: list[dict[str, Any]] = []
    for p in message.content:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif not isinstance(p, ImagePart):
            raise TypeError(
                f"a {type(p).__name__} is not message content (tool turns have their own form)"
            )
        else:
            out.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": p.media_type, "data": encoded(p)},
                }
            )
    return out


@dataclass(frozen=True)
class ImageLimits:
    """What an API accepts: media types, pixels a side, bytes an image and a request (None: no limit)."""

    media_types: frozenset[str] | None = None
    max_side: int | None = None
    max_image_bytes: int | None = None
    max_request_bytes: int | None = None
    #: what the refusal names as the limit's source
    source: str = ""

    def check(self, sample: Sample) -> None:
        """A one-line ConfigError naming the sample and the image that breaks a limit."""
        total = 0
        for i, img in enumerate(im for m in sample.messages for im in m.images):
            where = f"sample {sample.id}, image {i + 1} ({img.sha256[:12]}, {img.media_type}, {img.width}x{img.height})"
            size = len(img.data) if img.data is not None else 0
            total += size
            if self.media_types is not None and img.media_type not in self.media_types:
                raise ConfigError(
                    f"{where}: {self.source} takes {', '.join(sorted(self.media_types))}; "
                    "re-encode with --param image_format=png or jpeg"
                )
            if self.max_side is not None and max(img.width, img.height) > self.max_side:
                raise ConfigError(
                    f"{where}: larger than {self.max_side} px a side ({self.source}); "
                    f"shrink it with --param image_max_side={self.max_side}"
                )
            if self.max_image_bytes is not None and size > self.max_image_bytes:
                raise ConfigError(
                    f"{where}: {size:,} bytes, over {self.source}'s {self.max_image_bytes:,} an image; "
                    "re-encode or shrink it (--param image_format=jpeg, image_max_side=N)"
                )
        if self.max_request_bytes is not None and total * 4 // 3 > self.max_request_bytes:
            raise ConfigError(
                f"sample {sample.id}: its images make a request over {self.source}'s {self.max_request_bytes:,} bytes"
            )


ANTHROPIC_LIMITS = ImageLimits(
    media_types=frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"}),
    max_side=8000,
    max_image_bytes=5 * 1024 * 1024,
    max_request_bytes=32 * 1024 * 1024,
    source="Anthropic's API",
)


def openai_limits(max_image_mb: float) -> ImageLimits:
    return ImageLimits(
        max_image_bytes=int(max_image_mb * 1024 * 1024),
        source="the server (--model-opt max_image_mb)",
    )
