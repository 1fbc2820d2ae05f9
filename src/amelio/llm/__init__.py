"""LLM providers, chosen by ``llm_provider`` and built from the settings."""

from __future__ import annotations

from amelio.errors import InvalidInput
from amelio.llm.base import (
    Completion,
    LLMRequest,
    Message,
    Provider,
    ProviderType,
    StreamEvent,
    TextDelta,
    not_configured,
)
from amelio.plugins import get_plugin_manager
from amelio.workspace.config import Settings

__all__ = [
    "Completion",
    "LLMRequest",
    "Message",
    "Provider",
    "ProviderType",
    "StreamEvent",
    "TextDelta",
    "get_provider",
    "provider_types",
]


def provider_types() -> dict[str, ProviderType]:
    """Every registered provider type by name (first registration wins)."""
    found: dict[str, ProviderType] = {}

    def register(provider_type: ProviderType) -> None:
        if isinstance(provider_type, ProviderType):
            found.setdefault(provider_type.name, provider_type)

    get_plugin_manager().hook.register_llm_providers(register=register)
    return found


def get_provider(settings: Settings, *, purpose: str = "This") -> Provider:
    """The configured provider, or :class:`~amelio.errors.LLMNotConfigured` saying
    how to configure one (``purpose`` names the feature that asked)."""
    if settings.llm_provider == "none":
        raise not_configured(purpose)
    types = provider_types()
    provider_type = types.get(settings.llm_provider)
    if provider_type is None:
        raise InvalidInput(
            f"Unknown LLM provider {settings.llm_provider!r}; use one of: "
            f"{', '.join(sorted(types))}, none.",
            field="llm_provider",
        )
    from amelio.llm.instrumented import InstrumentedProvider

    return InstrumentedProvider(provider_type.build(settings))  # type: ignore[return-value]
