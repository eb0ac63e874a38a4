"""Model providers: OpenAI-compatible endpoints, local GGUF through llama.cpp, a scripted one for tests."""
