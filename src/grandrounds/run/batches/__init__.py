"""Batch APIs (OpenAI's Batch API, Anthropic's Message Batches): half-price calls collected into
batches, submitted, polled and landed in the store; `executor` is what a run calls."""
