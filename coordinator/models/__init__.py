"""Model providers: what a step sends (``ModelRequest``) and what it gets back (``ModelReply``)."""

from __future__ import annotations

from coordinator.models.base import (
    ChatMessage,
    Model,
    ModelReply,
    ModelRequest,
    ModelToolCall,
    ToolSpec,
)

__all__ = ["ChatMessage", "Model", "ModelReply", "ModelRequest", "ModelToolCall", "ToolSpec"]
