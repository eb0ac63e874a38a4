"""The built-in providers: name -> ``module:class``, read by :data:`grandrounds.core.registry.PROVIDERS`
the first time a provider is named (nothing here is imported until then). Plugins add theirs through
the ``grandrounds.providers`` entry-point group instead."""

from __future__ import annotations

BUILTINS: dict[str, str] = {
    "openai": "grandrounds.providers.openai_compat:OpenAIProvider",
    "anthropic": "grandrounds.providers.anthropic:AnthropicProvider",
    "llamacpp": "grandrounds.providers.llamacpp:LlamaCppProvider",
    "scripted": "grandrounds.providers.scripted:ScriptedProvider",
    "vllm": "grandrounds.providers.engines:VLLMProvider",
    "sglang": "grandrounds.providers.engines:SGLangProvider",
}
