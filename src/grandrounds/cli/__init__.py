"""Layer 7, the `grandrounds` command: `main` builds the app, one module per command group."""
