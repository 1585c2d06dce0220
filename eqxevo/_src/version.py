"""The package version: one line, read by hatch ([tool.hatch.version])."""

__version__ = "0.2.0.dev0"
