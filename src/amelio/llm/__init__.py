"""LLM providers, chosen by ``llm_provider`` and built from the settings.

The public face for plugin authors who add a provider through the
``register_llm_providers`` hook: :class:`ProviderType` (what to register),
:class:`Provider` (what its ``build(settings)`` returns), the values a provider
takes and gives (an :class:`LLMRequest`: a system prompt and :class:`Message` turns;
a :class:`Completion`; :class:`TextDelta` pieces; ``StreamEvent``, either of the
last two), and the errors it raises: :class:`LLMNotConfigured` naming the setting to set,
:class:`LLMUnavailable` when the model cannot be reached, :class:`LLMError` for the
rest.

This package stays light (no SDK, no settings model): every built-in provider
module is imported whenever the plugin manager is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from amelio.errors import InvalidInput, LLMError, LLMNotConfigured, LLMUnavailable
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
from amelio.plugins import collect

if TYPE_CHECKING:
    from amelio.workspace.config import Settings

__all__ = [
    "Completion",
    "LLMError",
    "LLMNotConfigured",
    "LLMRequest",
    "LLMUnavailable",
    "Message",
    "Provider",
    "ProviderType",
    "StreamEvent",
    "TextDelta",
    "get_provider",
    "provider_types",
    "settings_for_model",
]


def provider_types() -> dict[str, ProviderType]:
    """Every registered provider type by name, built-ins first
    (:func:`amelio.plugins.collect`)."""
    return collect("register_llm_providers", ProviderType)


def get_provider(
    settings: Settings, *, purpose: str = "This", configured: Settings | None = None
) -> Provider:
    """The configured provider, or :class:`~amelio.errors.LLMNotConfigured` saying
    how to configure one (``purpose`` names the feature that asked).

    ``configured`` is the workspace's own settings when ``settings`` carries a model
    that a caller named: the metrics then label that model ``other`` unless the
    workspace configured it, so callers cannot mint label values."""
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

    inner = provider_type.build(settings)
    models = InstrumentedProvider.labelled_models(configured or settings)
    if not settings.llm_model:
        models |= {inner.model}  # the provider's own default, not a caller's choice
    return InstrumentedProvider(inner, models)  # type: ignore[return-value]


def settings_for_model(
    settings: Settings, model: str, *, provider: str | None = None, base_url: str | None = None
) -> Settings:
    """``settings`` answering with ``model``: its name on a served provider, or, for the
    ``local`` provider, the path of its GGUF file."""
    if not model.strip():
        raise InvalidInput("Name the model: it is empty.", field="model")
    update: dict[str, Any] = {"llm_model": model}
    if provider:
        update["llm_provider"] = provider
    if base_url:
        update["llm_base_url"] = base_url
    if (provider or settings.llm_provider) == "local":
        update |= {"llm_model_path": model, "llm_model": Path(model).stem}
    return settings.model_copy(update=update)
