"""The bus client: the coordinator's side of the control broker, which asks peers, takes
their notes and knows which are alive. It knows nothing of tests."""
