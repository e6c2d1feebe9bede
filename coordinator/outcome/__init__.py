"""What a test leaves: its result and verdict (results), its JUnit file, and its folder (storage)."""
