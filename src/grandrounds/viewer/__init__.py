"""A local web viewer over the store: browse runs, filter, search, drill down, review."""
