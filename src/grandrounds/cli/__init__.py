"""Layer 9, the `grandrounds` command: `main` builds the app, one module per command group."""
