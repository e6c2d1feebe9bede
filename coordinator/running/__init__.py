"""Running a test: the Maestro API, a run, a series, a phase and its ending, and the
actions, casts and collections a phase sends through the bus client."""
