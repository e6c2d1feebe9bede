"""Inspector daemon (`maestro-inspector`): reads a SUT's management interface on an interval."""
