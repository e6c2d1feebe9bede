"""Sender and receiver daemons (`maestro-worker`); drivers/ holds one module per messaging client."""
