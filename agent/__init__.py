"""Fault-injection agent daemon (`maestro-agent`): handler sources, user commands, built-in actions."""
