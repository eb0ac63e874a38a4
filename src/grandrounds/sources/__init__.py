"""Layer 3, where things come from: checksummed downloads, official text read out of pinned upstream
files, protocol presets (the reference and ours) and where a benchmark's data is found."""
