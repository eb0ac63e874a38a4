"""Layer 1, the foundation: typed records, content hashing, errors, text helpers, the component
registry, declared parameters, the event loop and how numbers look. Imports nothing else of grandrounds."""
