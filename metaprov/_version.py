"""The package version, in a module of its own so every stage can read it without the public API."""

__version__ = "0.1.0"
