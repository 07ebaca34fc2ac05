"""Weft's Python client: `from weft.client import Client` (see client.py)."""
