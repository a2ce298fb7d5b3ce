"""The tool's version, in a module of its own so that every layer can name it (schedule
files, study names) without importing the top-level package."""

__version__ = "0.1.0"
