"""grandrounds: evaluate large language models on medical benchmarks, with every answer shown."""

__version__ = "0.1.0"
