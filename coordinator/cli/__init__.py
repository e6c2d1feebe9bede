"""The `maestro` command line: its parser (main), its commands, and what they share (support)."""
